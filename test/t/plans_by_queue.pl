# Copyright (c) 2026, the sbqueue authors
#
# The statements that read a queue's head (a peek, a receive under leases or
# locks in the rows, a session's receive, maintenance's look at locks) go
# through an index led by queue_id, also beside one queue much larger than
# the rest. Their plans are generic: judged by the table's statistics, "queue
# = $1" matches most rows, and a walk of the primary key from the starting
# number, filtered by queue, looked cheaper; for a small queue that walk read
# every later row of the table, in every peek and in every receive that asked
# for more messages than the queue had. Each plan is shown by auto_explain as
# the session makes it; then the blocks a peek reads are counted.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/../harness";
use SbqNode;

my $node = SbqNode::preloaded('plans_by_queue', qq(
autovacuum = off
));
# the small queues' messages first, so that their numbers are below every one
# of the large queue's; then 30,000 in it, and 10,000 of them dead-lettered
$node->safe_psql('postgres', q{
	CREATE EXTENSION sbqueue;
	SELECT sbq_create_queue('big');
	SELECT sbq_create_queue('small', lock_duration => '5 minutes', max_delivery_count => 100);
	SELECT sbq_create_queue('small_rows', lock_duration => '5 minutes', max_delivery_count => 100);
	SELECT sbq_create_queue('small_s', requires_session => true);
	SELECT count(*) FROM sbq_send_batch('small', array_fill('s'::text, ARRAY[4]));
	SELECT count(*) FROM sbq_send_batch('small_rows', array_fill('r'::text, ARRAY[3]));
	SELECT count(*) FROM sbq_send_batch('small_s', array_fill('t'::text, ARRAY[3]),
		session_id => 'a');
	-- sessions b and c: a message before the large queue's and one after them, so
	-- that the numbers their locks span hold all of the large queue's
	SELECT sbq_send('small_s', 'b1'::text, session_id => 'b');
	SELECT sbq_send('small_s', 'c1'::text, session_id => 'c');
	-- a dead letter of the small queue, and a message of it held under a lock
	-- for the whole test (so that its head stays below the large queue's rows)
	SELECT sbq_deadletter('small', lock_token) FROM sbq_receive('small', 1);
	SELECT count(*) FROM sbq_receive('small', 1);
	SET sbqueue.memory_locks = off;
	SELECT count(*) FROM sbq_receive('small_rows', 1);
	RESET sbqueue.memory_locks;
	SELECT count(*) FROM generate_series(1, 6) g,
		LATERAL sbq_send_batch('big', array_fill(('b' || g)::text, ARRAY[5000]));
	SELECT sbq_send('small_s', 'b2'::text, session_id => 'b');
	SELECT sbq_send('small_s', 'c2'::text, session_id => 'c');
	DO $$
	DECLARE t uuid;
	BEGIN
		FOR i IN 1 .. 2 LOOP
			FOR t IN SELECT lock_token FROM sbq_receive('big', 5000) LOOP
				PERFORM sbq_deadletter('big', t);
			END LOOP;
		END LOOP;
	END $$;
	VACUUM ANALYZE sbq.messages, sbq.dead_letters;
});
is( $node->safe_psql('postgres', q{
		SELECT (SELECT count(*) FROM sbq.messages WHERE queue_id = (SELECT queue_id FROM sbq.queues WHERE name = 'big'))
		    || ' ' || (SELECT count(*) FROM sbq.dead_letters)}),
	'20000 10001', 'the large queue holds 20,000 messages and 10,000 dead letters');

# every plan a statement of this session makes, as a notice
my $explain = SbqNode::explain_notices();
my (undef, undef, $plans) = $node->psql('postgres', qq{
	$explain
	SELECT count(*) FROM sbq_peek('small', 10);
	SELECT count(*) FROM sbq_peek('small/\$deadletterqueue', 10);
	-- under leases, from the queue's head, asking for more than it has
	SELECT count(*) FROM sbq_receive('small', 10);
	-- a session's messages; and sessions released with their 2 messages locked
	SELECT count(*) FROM sbq_receive_session('small_s',
		(SELECT session_token FROM sbq_accept_session('small_s', 'a')), 10);
	SELECT session_token AS b FROM sbq_accept_session('small_s', 'b') \\gset
	SELECT count(*) FROM sbq_receive_session('small_s', :'b', 10);
	SELECT sbq_release_session('small_s', :'b');
	-- locks in the rows, and maintenance's look at them
	SET sbqueue.memory_locks = off;
	SELECT session_token AS c FROM sbq_accept_session('small_s', 'c') \\gset
	SELECT count(*) FROM sbq_receive_session('small_s', :'c', 10);
	SELECT sbq_release_session('small_s', :'c');
	SELECT count(*) FROM sbq_receive('small_rows', 10);
	SELECT count(*) FROM sbq_maintain();
});
my @plans = grep { /Query Text:/ } split /(?=NOTICE:)/, $plans;
my @heads = grep { /queue_id = \$1/ } @plans;
cmp_ok(scalar(@heads), '>=', 6,
	'the session planned the statements that read a queue\'s head (peeks, receives, maintenance)')
  or diag($plans);
ok((grep { /Query Text: SELECT s\.ready_seq, .*BETWEEN \$3 AND \$4/s } @plans),
	'among them the look at the messages a released session held')
  or diag($plans);
# a plan node that walks a primary key and filters by queue (not a look-up of
# numbers, "sequence_number = ANY ($1)", which filters by queue too)
my $walk = qr/Index (?:Only )?Scan using (?:messages|dead_letters)_pkey[^\n]*\n(?:[^\n]*Index Cond:[^\n]*\n)?[^\n]*Filter:[^\n]*queue_id/;
sub walks
{
	my ($plan) = @_;
	while ($plan =~ /$walk/g)
	{
		return 1 if $& !~ /Index Cond: \(sequence_number = ANY/;
	}
	return 0;
}
my @walks = grep { walks($_) } @plans;
is(scalar(@walks), 0,
	'none walks a primary key filtering by queue, beside a queue 10,000 times larger')
  or diag(join("\n----\n", @walks));

# what that buys: the blocks a call on a small queue reads (the walk read the
# rest of the table, hundreds), in a connection that has made its plans (the
# first call of a connection prepares its statements); the receives give back
# what they got, so that the next finds them free again
sub blocks
{
	my ($sql, $set) = @_;
	my $json = $node->safe_psql('postgres', qq{
		$set
		$sql;
		EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) $sql});
	my ($hit) = $json =~ /"Shared Hit Blocks": (\d+)/;
	my ($read) = $json =~ /"Shared Read Blocks": (\d+)/;
	return ($hit // 0) + ($read // 0);
}
my %calls = (
	'a peek of the small queue' => [q{SELECT count(*) FROM sbq_peek('small', 10)}, ''],
	'a peek of its dead letter' =>
	  [q{SELECT count(*) FROM sbq_peek('small/$deadletterqueue', 10)}, ''],
	'a receive of 10 there (2 free), given back' =>
	  [q{SELECT count(sbq_abandon('small', lock_token)) FROM sbq_receive('small', 10)}, ''],
	'the same with locks stored in the rows' => [
		q{SELECT count(sbq_abandon('small_rows', lock_token)) FROM sbq_receive('small_rows', 10)},
		'SET sbqueue.memory_locks = off;'
	]);
for my $what (sort keys %calls)
{
	my $n = blocks(@{ $calls{$what} });
	cmp_ok($n, '<', 50, "$what reads $n blocks");
}

# Only the statement's own planning is restricted. A DBA's rule on the table
# adds an action that PostgreSQL plans before the statement's DELETE, from the
# same text: it must see every index (restricted to the primary key, it would
# read every dead letter of the database for each message completed).
(undef, undef, $plans) = $node->psql('postgres', qq{
	$explain
	BEGIN;
	CREATE RULE dba_forget AS ON DELETE TO sbq.messages DO ALSO
		DELETE FROM sbq.dead_letters d
		 WHERE d.queue_id = OLD.queue_id AND d.message_id = OLD.message_id;
	SELECT count(sbq_complete('big', lock_token)) FROM sbq_receive('big', 3);
	SELECT sbq_complete('big', array_agg(lock_token)) FROM sbq_receive('big', 3);
	ROLLBACK;
});
@plans = grep { /Query Text:/ } split /(?=NOTICE:)/, $plans;
ok((grep { /on dead_letters d/ } @plans),
	'the plans of a DBA\'s rule action were shown') or diag($plans);
my @rule_scans = grep { /Seq Scan on dead_letters d/ } @plans;
is(scalar(@rule_scans), 0, 'a DBA\'s rule action planned with the statement sees every index')
  or diag(join("\n----\n", @rule_scans));

# With the receive index dropped by a DBA, the indexes led by queue_id are
# partial ones that cannot serve a peek or a receive: the statements then keep
# every index, rather than none (a scan of the whole table and a sort).
(undef, undef, $plans) = $node->psql('postgres', qq{
	$explain
	BEGIN;
	DROP INDEX sbq.messages_receive_idx;
	SELECT count(*) FROM sbq_peek('small', 10);
	SELECT count(sbq_abandon('small', lock_token)) FROM sbq_receive('small', 10);
	ROLLBACK;
});
@plans = grep { /Query Text:/ && /queue_id = \$1/ } split /(?=NOTICE:)/, $plans;
cmp_ok(scalar(@plans), '>=', 2, 'with the receive index dropped, the peek and receive were planned')
  or diag($plans);
my @scans = grep { /Seq Scan on messages/ } @plans;
is(scalar(@scans), 0, 'with the receive index dropped, no statement scans the whole table')
  or diag(join("\n----\n", @scans));

$node->stop;
done_testing();
