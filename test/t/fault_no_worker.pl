# Copyright (c) 2026, the sbqueue authors
#
# F7: correctness never depends on the maintenance worker (I10). Twice under
# load, then a final drain and the checker: first with sbqueue preloaded and
# sbqueue.enable_maintenance_worker = off, then with the library not
# preloaded at all. No worker runs either time, yet messages left to expire
# on their last allowed delivery are dead-lettered at the limit by receive
# (MaxDeliveryCountExceeded, delivery_count = max_delivery_count: I6), and
# messages whose lock expired are received again with the next count (I5);
# I1-I6 hold and pg_amcheck is clean.
use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/../harness";
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use SbqFault;

my $node = SbqFault::new_node('f7', conf => "sbqueue.enable_maintenance_worker = off\n");
my $ci = SbqFault::conninfo($node);
my $workers = q{SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'sbqueue maintenance'};

sub run_without_worker
{
	my ($name, $queue) = @_;
	SbqFault::create_queue($node, $queue, lock => 5, mdc => 2);
	my $hist = SbqFault::history($queue);
	my $load = SbqFault::start_load($ci, $queue, $hist, duration => 10, mdc => 2, poison => 0.08);
	usleep(5_000_000);
	is($node->safe_psql('postgres', $workers), '0', "$name: no maintenance worker runs under load");
	SbqFault::stop_load($load, wait => 10);
	my $sum = SbqFault::drain_and_check($ci, $queue, $hist, $name);
	cmp_ok($sum->{dead_lettered_after_expiry} // 0, '>', 0,
		"$name: messages left to expire on their last delivery were dead-lettered by receive ($sum->{dead_lettered_after_expiry})");
	cmp_ok($sum->{redelivered_after_expiry} // 0, '>', 0,
		"$name: messages whose lock expired were received again ($sum->{redelivered_after_expiry})");
	is($node->safe_psql($SbqFault::DB,
			"SELECT count(*) FROM sbq_peek('$queue/\$deadletterqueue', 5000) WHERE dead_letter_reason = 'MaxDeliveryCountExceeded' AND delivery_count = 2"),
		$sum->{dead_letters}, "$name: every dead letter is MaxDeliveryCountExceeded at delivery_count 2");
	is($node->safe_psql('postgres', $workers), '0', "$name: and still no worker ran");
	# the counters, stored in the rows without the preload (updated there without
	# the SQL statement once a backend has its row), and moved there from shared
	# memory with it: no crash, so every send, completion and dead letter the
	# history holds is counted once
	is($sum->{sent_unknown} + $sum->{settles_unknown} + $sum->{receives_unknown}, 0,
		"$name: no call's outcome is unknown");
	is($node->safe_psql($SbqFault::DB,
			"SELECT concat_ws(' ', sent, received, completed, dead_lettered) FROM sbq_queue_stats WHERE queue = '$queue'"),
		join(' ', $sum->{sent_ok}, $sum->{deliveries}, $sum->{completed}, $sum->{dead_letters}),
		"$name: the queue's counters agree with the history: sent, received, completed, dead-lettered");
}

ok($node->poll_query_until('postgres',
		"SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'sbqueue launcher'", '1'),
	'preloaded: the launcher runs');
usleep(1_500_000);
is($node->safe_psql('postgres', $workers), '0', 'sbqueue.enable_maintenance_worker = off: no worker');
run_without_worker('worker off', 'f7off');

# not preloaded at all
$node->append_conf('postgresql.conf', "shared_preload_libraries = ''\n");
$node->restart;
is($node->safe_psql('postgres', 'SHOW shared_preload_libraries'), '', 'restarted without preloading sbqueue');
is($node->safe_psql('postgres', q{SELECT count(*) FROM pg_stat_activity WHERE backend_type LIKE 'sbqueue%'}),
	'0', 'no launcher, no worker');
run_without_worker('not preloaded', 'f7bare');

# each call stores its counts: in its backend's row, updated without the SQL
# statement once there, unless the table has a trigger (then the statement
# runs, and the trigger fires for every store)
$node->safe_psql($SbqFault::DB, q{
	CREATE TABLE f7_counted (sent bigint);
	CREATE FUNCTION f7_counted() RETURNS trigger LANGUAGE plpgsql AS
		$$ BEGIN INSERT INTO public.f7_counted VALUES (NEW.sent); RETURN NEW; END $$;
	SELECT sbq_create_queue('f7trig');
	SELECT sbq_send('f7trig', 'first');
	CREATE TRIGGER f7_counted BEFORE UPDATE ON sbq.queue_counters
		FOR EACH ROW EXECUTE FUNCTION f7_counted();
	SELECT sbq_send('f7trig', 'second');
	SELECT sbq_send('f7trig', 'third');
	DROP TRIGGER f7_counted ON sbq.queue_counters;
	SELECT sbq_send('f7trig', 'fourth');});
is($node->safe_psql($SbqFault::DB,
		q{SELECT string_agg(sent::text, ',' ORDER BY sent) FROM f7_counted}
		  . q{ UNION ALL SELECT sent::text FROM sbq_queue_stats WHERE queue = 'f7trig'}),
	"2,3\n4", 'not preloaded: a trigger on the counters fires for each store while it is there, and four are counted');

# the update takes the row as the statement does (FOR NO KEY UPDATE): a reader that
# holds it FOR KEY SHARE (as a foreign key's check would) does not hold up a call
my $sender = $node->background_psql($SbqFault::DB, on_error_stop => 0);
$sender->query_safe(q{SELECT sbq_send('f7trig', 'its row is there now')});
my $sharer = $node->background_psql($SbqFault::DB);
$sharer->query_safe(q{BEGIN; SELECT count(*) FROM (SELECT FROM sbq.queue_counters FOR KEY SHARE) s});
my ($out, $ret) = $sender->query(q{SET lock_timeout = '2s'; SELECT sbq_send('f7trig', 'beside a key share') > 0});
is($ret, 0, 'not preloaded: a call stores its counts beside a FOR KEY SHARE lock on its row');
$sharer->query_safe('ROLLBACK');
$sharer->quit;
$sender->quit;

# the statement is an INSERT ... ON CONFLICT DO UPDATE: a tables' owner (not a
# superuser, who passes every check) without INSERT on the counters is refused
# it, and the update without the statement is refused as well
$node->safe_psql('postgres', 'CREATE DATABASE f7own');
$node->safe_psql('postgres', 'CREATE ROLE f7owner');
$node->safe_psql('f7own', q{
	CREATE EXTENSION sbqueue;
	DO $$DECLARE r record; BEGIN
		FOR r IN SELECT oid::regclass AS n FROM pg_class
		          WHERE relnamespace = 'sbq'::regnamespace AND relkind IN ('r', 'v', 'p') LOOP
			EXECUTE format('ALTER TABLE %s OWNER TO f7owner', r.n);
		END LOOP;
	END $$;
	ALTER SCHEMA sbq OWNER TO f7owner;
	GRANT ALL ON ALL SEQUENCES IN SCHEMA sbq TO f7owner;
	SELECT sbq_create_queue('own');
	SELECT sbq_send('own', 'its row is there now');
	REVOKE INSERT ON sbq.queue_counters FROM f7owner;});
my ($rc, $stdout, $stderr) = $node->psql('f7own', q{SELECT sbq_send('own', 'no insert right')});
like($stderr, qr/permission denied for table queue_counters/,
	'not preloaded: a tables\' owner without INSERT on the counters is refused a call that counts, as by the statement');
is($node->safe_psql('f7own', q{SELECT sent FROM sbq_queue_stats WHERE queue = 'own'}), '1',
	'... which counts nothing');

# without the worker, a receive activates the due scheduled messages itself;
# it looks first (one scan of the small index of scheduled messages), and runs
# the activation only when the look finds one due: with none due, that look is
# its only scan of the scheduled messages, by index or of the whole table
sub receive_scans
{
	my ($queue) = @_;
	my @out = split /\n/, $node->safe_psql($SbqFault::DB, qq{
		BEGIN;
		SELECT coalesce(string_agg(convert_from(body, 'UTF8'), ','), '-') FROM sbq_receive('$queue', 5);
		SELECT pg_stat_get_xact_numscans('sbq.messages'::regclass)
		       + pg_stat_get_xact_numscans('sbq.messages_scheduled_idx'::regclass);
		COMMIT;});
	return "$out[0] $out[1]";
}
$node->safe_psql($SbqFault::DB, q{
	SELECT sbq_create_queue('f7sched');
	SELECT sbq_send('f7sched', 'now');
	SELECT sbq_send('f7sched', 'later', scheduled_enqueue_time => clock_timestamp() + interval '2 seconds');});
is(receive_scans('f7sched'), 'now 1',
	'not preloaded: a receive with nothing scheduled due looks once, and activates nothing');
is(receive_scans('f7sched'), '- 1', '... and again when nothing is left to receive');
usleep(2_100_000);
$node->safe_psql($SbqFault::DB, q{SELECT sbq_send('f7sched', 'newer')});
my ($got, $n) = split / /, receive_scans('f7sched');
is($got, 'newer,later',
	'not preloaded: once due, the scheduled message joins the back of the queue and is handed out by the receive that found it due');
cmp_ok($n, '>', 1, '... which looked, and then ran the activation');

SbqFault::amcheck($node, 'F7');
SbqFault::log_clean($node, 'F7');
$node->stop;
done_testing();
