# Copyright (c) 2026, the sbqueue authors
#
# The maintenance worker vacuums sbq.messages once sbqueue.vacuum_threshold
# dead rows are counted there, so that a cycling queue keeps its size; it
# does not vacuum again while a transaction holds the horizon back (that
# vacuum could remove nothing), and does once the transaction ends; and its
# vacuum takes no parallel workers (they would be background worker slots
# beyond sbqueue's 1 + sbqueue.max_workers, even where an index is large
# enough for a parallel vacuum, as every index is here).
# Autovacuum is off on this node: every vacuum counted here is the worker's.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);
use IPC::Run;

my $node = PostgreSQL::Test::Cluster->new('vacuum');
$node->init;
$node->append_conf('postgresql.conf', qq{
shared_preload_libraries = 'sbqueue'
autovacuum = off
sbqueue.maintenance_interval = '200ms'
# an idle worker ticks every second, not every minute: the end of the held
# transaction below is seen at once, and the ticks that must not vacuum while
# it holds are many
sbqueue.idle_maintenance_interval = '1s'
sbqueue.vacuum_threshold = 1000
min_parallel_index_scan_size = 0
});
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION sbqueue');
$node->safe_psql('postgres', "SELECT sbq_create_queue('v')");

my $stats = "SELECT n_dead_tup, vacuum_count FROM pg_stat_user_tables WHERE relid = 'sbq.messages'::regclass";

sub vacuums { (split /\|/, $node->safe_psql('postgres', $stats))[1] }

# send n messages, receive them and complete them; the receive locks each
# (a peek-lock delivery) and the complete deletes its row
sub cycle
{
	my $n = shift;
	is($node->safe_psql('postgres', qq{
		SELECT count(*) FROM (SELECT sbq_send('v', 'x') FROM generate_series(1, $n)) s;
		SELECT count(*) FROM (SELECT sbq_complete('v', lock_token) FROM sbq_receive('v', $n)) s;
		SELECT pg_stat_force_next_flush();
	}), "$n\n$n\n", "cycled $n messages");
}

# wait for the worker's vacuum number $n, and for the dead rows to be gone
sub vacuumed
{
	my ($n, $name) = @_;
	ok($node->poll_query_until('postgres',
			"SELECT vacuum_count >= $n AND n_dead_tup < 1000 FROM pg_stat_user_tables WHERE relid = 'sbq.messages'::regclass"),
		$name);
}

# The most parallel workers led by a maintenance worker at once, sampled every
# few milliseconds (a fresh look each time) until a row appears in
# sampler_stop; and how many samples. A procedure that commits after each
# look, so that it never holds back the horizon the vacuums need.
$node->safe_psql('postgres', q{
	CREATE TABLE sampler_stop ();
	CREATE PROCEDURE parallel_under_worker(INOUT most int DEFAULT 0, INOUT samples int DEFAULT 0)
	LANGUAGE plpgsql AS $$
	DECLARE n int;
	BEGIN
		LOOP
			SELECT count(*) INTO n FROM pg_stat_activity w JOIN pg_stat_activity l ON w.leader_pid = l.pid
			 WHERE w.backend_type = 'parallel worker' AND l.backend_type = 'sbqueue maintenance';
			most := greatest(most, n);
			samples := samples + 1;
			EXIT WHEN EXISTS (SELECT FROM sampler_stop);
			COMMIT;
			PERFORM pg_sleep(0.002);
		END LOOP;
	END $$;
});
my ($sampled, $sampler_err) = ('', '');
my $sampler = IPC::Run::start(
	[ 'psql', '-XAt', '-d', $node->connstr('postgres'), '-c', 'CALL parallel_under_worker()' ],
	'>', \$sampled, '2>', \$sampler_err);

is(vacuums(), '0', 'no vacuum yet');
cycle(1500);
vacuumed(1, 'the worker vacuums the message table after 1,500 completes');
like($node->safe_psql('postgres', 'SELECT last_vacuum IS NOT NULL FROM pg_stat_user_tables WHERE relid = \'sbq.messages\'::regclass'),
	qr/^t$/, 'a vacuum (not an autovacuum) by the worker');

# cycling keeps the table at its size: the vacuumed space is used again
my $size0;
for my $round (1 .. 8)
{
	my $before = vacuums();
	cycle(1500);
	vacuumed($before + 1, "round $round: vacuumed again");
	$size0 = $node->safe_psql('postgres', "SELECT pg_relation_size('sbq.messages')") if $round == 2;
}
my $size1 = $node->safe_psql('postgres', "SELECT pg_relation_size('sbq.messages')");
$node->safe_psql('postgres', 'INSERT INTO sampler_stop DEFAULT VALUES');
$sampler->finish;
my ($most, $samples) = split /\|/, ($sampled =~ s/\s+$//r);
cmp_ok($samples // 0, '>', 100, "the nine vacuums were watched (samples: $samples) $sampler_err");
is($most, '0', 'no vacuum of the worker took parallel workers');
cmp_ok($size1, '<=', $size0 * 1.1, "eight rounds of 1,500 messages: the heap stays at its size ($size0 -> $size1 bytes)");

# a transaction holding the horizon back: one vacuum that removes nothing,
# none after it. The horizon has moved since the last vacuum (an xid is
# given out first), so the first 1,500 dead rows are vacuumed once; wait
# for that vacuum rather than guess how long a loaded machine takes.
$node->safe_psql('postgres', 'SELECT txid_current()');
my $holder = $node->background_psql('postgres');
# its timer runs per query, not from here: the cycles below take their time
# on a loaded machine while it is idle
$holder->set_query_timer_restart;
$holder->query_safe('BEGIN ISOLATION LEVEL REPEATABLE READ');
$holder->query_safe('SELECT txid_current()');
my $held_at = vacuums();
cycle(1500);
ok($node->poll_query_until('postgres',
		"SELECT vacuum_count >= $held_at + 1 FROM pg_stat_user_tables WHERE relid = 'sbq.messages'::regclass"),
	'held horizon: the first 1,500 dead rows are vacuumed once, the horizon having moved');
my $held_1 = vacuums();
is($held_1, $held_at + 1, 'held horizon: one vacuum, not more, for the first 1,500 dead rows');
cycle(1500);
usleep(2_000_000);    # ten ticks of the worker
is(vacuums(), $held_1, 'held horizon: no vacuum again while nothing it could remove has changed');
like((split /\|/, $node->safe_psql('postgres', $stats))[0], qr/^\d{4,}$/, 'the dead rows are still there');

$holder->query_safe('COMMIT');
$holder->quit;
vacuumed($held_1 + 1, 'once the transaction ends the worker vacuums, and the dead rows are gone');

# sbqueue.vacuum_threshold = 0: the table is left to autovacuum
$node->safe_psql('postgres', 'ALTER SYSTEM SET sbqueue.vacuum_threshold = 0');
$node->reload;
usleep(500_000);
my $off_at = vacuums();
cycle(3000);
usleep(2_000_000);
is(vacuums(), $off_at, 'sbqueue.vacuum_threshold = 0: no vacuum by the worker');

$node->stop;
done_testing();
