# Copyright (c) 2026, the sbqueue authors
#
# The maintenance workers as a pool (sbqueue.max_workers): 30 databases with
# the extension, one without, on a server with max_worker_processes = 8 and
# sbqueue.max_workers = 2. Every database gets a pass within a bound after a
# restart (measured), and no worker started then leaves before the tick it
# was started for; never more than 2 workers and 1 launcher run, so the
# sbqueue launcher and workers hold at most 2 + 1 background worker slots and
# a parallel query still gets all the workers the other slots allow; the
# database without the extension is looked at once and never again; an
# over-delivered message is dead-lettered promptly in several databases with
# no receive call; a database created later is picked up and one dropped is
# forgotten; a crash of a worker in the middle of a pass loses no message.
#
# How it watches: a plpgsql function (pool_sample, below) samples
# pg_stat_activity and sbq_maintenance_status every 10 ms server-side, in one
# connection, for as long as a phase lasts, and returns what it saw (process
# forks are slow on the small machines this runs on; a psql per sample would
# see one sample in ten).
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use IPC::Run;
use Time::HiRes qw(time usleep);
use FindBin;
use lib "$FindBin::RealBin/../harness";
use SbqNode;

# the databases with sbqueue; db01 also holds the sampler and the parallel
# query's table, db02 .. db06 get an over-delivered message each, db29 is
# dropped, db30 has the worker that is killed
my @dbs = map { sprintf('db%02d', $_) } 1 .. 30;
my @expiry_dbs = @dbs[ 1 .. 5 ];
my $dropped = 'db29';
my $crash_db = 'db30';

my $node = PostgreSQL::Test::Cluster->new('worker_pool');
$node->init;
$node->append_conf(
	'postgresql.conf', qq(
shared_preload_libraries = 'sbqueue'
max_worker_processes = 8
sbqueue.max_workers = 2
restart_after_crash = on
log_statement = none
# off while the databases are made; ALTER SYSTEM turns it on once the
# sampler watches (below)
sbqueue.enable_maintenance_worker = off
));
$node->start;

# --- set-up: 30 copies of a database with sbqueue, and one without
$node->safe_psql('postgres', 'CREATE DATABASE sbq_template');
$node->safe_psql('sbq_template', 'CREATE EXTENSION sbqueue');
# a template that accepts no connections: the launcher leaves it alone
$node->safe_psql('postgres',
	'ALTER DATABASE sbq_template WITH IS_TEMPLATE true ALLOW_CONNECTIONS false');
$node->safe_psql('postgres',
	join('', map { "CREATE DATABASE $_ TEMPLATE sbq_template;\n" } @dbs)
	  . "CREATE DATABASE noext;\n");

# the parallel query's table: 4 workers planned (parallel_workers), which is
# every slot sbqueue must leave free (see the parallel query section)
$node->safe_psql('db01', q{
	CREATE TABLE big AS SELECT g AS id, md5(g::text) AS pad FROM generate_series(1, 200000) g;
	ALTER TABLE big SET (parallel_workers = 4);
	VACUUM ANALYZE big;
});

# The sampler: every 10 ms, how many sbqueue maintenance workers (with any
# parallel workers they lead: a VACUUM may have some, and they take slots
# too) and launchers pg_stat_activity shows, how many workers sbq_maintenance_status
# shows, which databases had a worker (and the pids of those in noext), and
# when every database of "dbs" was first 'installed' with a good pass. It
# stops "tail" after that moment, when a row for its run appears in
# sampler_stop, or after "cap". pg_stat_clear_snapshot(): a transaction keeps
# its first look at pg_stat_activity otherwise.
$node->safe_psql('db01', q{
	CREATE TABLE sampler_stop (run_name text);
	CREATE FUNCTION pool_sample(p_run text, dbs name[], tail interval, cap interval,
		OUT samples int, OUT max_workers int, OUT max_status_workers int,
		OUT min_launchers int, OUT max_launchers int, OUT full_samples int,
		OUT noext_pids int[], OUT visited name[], OUT all_passed double precision,
		OUT first_sample double precision, OUT last_sample double precision)
	LANGUAGE plpgsql AS $$
	DECLARE
		w int;
		l int;
		sw int;
		np int[];
		v name[];
		started timestamptz := clock_timestamp();
	BEGIN
		samples := 0; max_workers := 0; max_status_workers := 0; full_samples := 0;
		max_launchers := 0; noext_pids := '{}'; visited := '{}';
		first_sample := extract(epoch FROM started);
		LOOP
			PERFORM pg_stat_clear_snapshot();
			SELECT count(*) FILTER (WHERE a.backend_type = 'sbqueue maintenance'
			                          OR a.leader_pid IN (SELECT b.pid FROM pg_stat_activity b
			                                               WHERE b.backend_type = 'sbqueue maintenance')),
			       count(*) FILTER (WHERE a.backend_type = 'sbqueue launcher'),
			       coalesce(array_agg(a.pid) FILTER (WHERE a.backend_type = 'sbqueue maintenance'
			                                         AND a.datname = 'noext'), '{}'),
			       coalesce(array_agg(a.datname) FILTER (WHERE a.backend_type = 'sbqueue maintenance'), '{}')
			  INTO w, l, np, v
			  FROM pg_stat_activity a;
			SELECT count(*) INTO sw FROM sbq_maintenance_status s WHERE s.worker_pid IS NOT NULL;
			samples := samples + 1;
			max_workers := greatest(max_workers, w);
			max_status_workers := greatest(max_status_workers, sw);
			min_launchers := least(coalesce(min_launchers, l), l);
			max_launchers := greatest(max_launchers, l);
			IF w = 2 THEN
				full_samples := full_samples + 1;
			END IF;
			noext_pids := ARRAY(SELECT DISTINCT x FROM unnest(noext_pids || np) x ORDER BY 1);
			visited := ARRAY(SELECT DISTINCT x FROM unnest(visited || v) x ORDER BY 1);
			IF all_passed IS NULL AND cardinality(dbs) > 0 AND
			   (SELECT count(*) FROM sbq_maintenance_status s
			     WHERE s.database = ANY (dbs) AND s.state = 'installed'
			       AND s.passes >= 1 AND s.last_pass_result = 'ok') = cardinality(dbs) THEN
				all_passed := extract(epoch FROM clock_timestamp());
			END IF;
			EXIT WHEN all_passed IS NOT NULL AND clock_timestamp() >= to_timestamp(all_passed) + tail;
			EXIT WHEN clock_timestamp() >= started + cap;
			EXIT WHEN EXISTS (SELECT 1 FROM sampler_stop s WHERE s.run_name = p_run);
			PERFORM pg_sleep(0.01);
		END LOOP;
		last_sample := extract(epoch FROM clock_timestamp());
	END $$;
});

# Wait (server-side, every 10 ms) until a maintenance worker runs in database
# db; its pid, or NULL after timeout.
$node->safe_psql('postgres', q{
	CREATE FUNCTION wait_for_worker(db name, timeout interval) RETURNS int
	LANGUAGE plpgsql AS $$
	DECLARE
		p int;
		deadline timestamptz := clock_timestamp() + timeout;
	BEGIN
		LOOP
			PERFORM pg_stat_clear_snapshot();
			SELECT a.pid INTO p FROM pg_stat_activity a
			 WHERE a.backend_type = 'sbqueue maintenance' AND a.datname = db;
			EXIT WHEN p IS NOT NULL OR clock_timestamp() > deadline;
			PERFORM pg_sleep(0.01);
		END LOOP;
		RETURN p;
	END $$;
});

my @sampler_fields = qw(samples max_workers max_status_workers min_launchers
  max_launchers full_samples noext_pids visited all_passed first_sample last_sample);

# Start the sampler in the background (its own psql), and return once it runs.
sub start_sampler
{
	my ($run, $want, $tail, $cap) = @_;
	my $s = { run => $run, out => '', err => '' };
	my $sql = "SELECT * FROM pool_sample('$run', '{" . join(',', @$want) . "}', '$tail', '$cap')";
	$s->{h} = IPC::Run::start(
		[ 'psql', '-XAt', '-v', 'ON_ERROR_STOP=1', '-d', $node->connstr('db01'), '-c', $sql ],
		'>', \$s->{out}, '2>', \$s->{err});
	$node->poll_query_until('db01',
		"SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'SELECT * FROM pool_sample(''$run''%'",
		'1')
	  or die "sampler $run did not start: $s->{err}";
	return $s;
}

# Wait for the sampler to end (stopping it first when $stop), and return what
# it saw as a hash.
sub finish_sampler
{
	my ($s, $stop) = @_;
	$node->safe_psql('db01', "INSERT INTO sampler_stop VALUES ('$s->{run}')") if $stop;
	$s->{h}->finish;
	chomp(my $out = $s->{out});
	my @v = split /\|/, $out, -1;
	die "sampler $s->{run} failed: $s->{err} $out" unless @v == @sampler_fields;
	my %r;
	@r{@sampler_fields} = @v;
	my @pids = $r{noext_pids} =~ /(\d+)/g;
	$r{noext_visits} = scalar @pids;
	$r{rate} = $r{samples} / (($r{last_sample} - $r{first_sample}) || 1);
	diag(sprintf('sampler %s: %d samples in %.1f s (%.0f/s), at most %d workers '
			. '(%d in sbq_maintenance_status), launchers %d..%d, %d samples with 2 workers, '
			. '%d workers seen in noext, %d databases visited',
			$s->{run}, $r{samples}, $r{last_sample} - $r{first_sample}, $r{rate},
			$r{max_workers}, $r{max_status_workers}, $r{min_launchers}, $r{max_launchers},
			$r{full_samples}, $r{noext_visits}, scalar(() = $r{visited} =~ /[^{},]+/g)));
	return \%r;
}

# The checks every sampled period must pass.
sub pool_bounds_hold
{
	my ($r, $what) = @_;
	local $Test::Builder::Level = $Test::Builder::Level + 1;
	# 10 ms sleeps and a few small queries: some 90 samples a second here,
	# also with the CPUs busy; 20 a second (one per 50 ms) is the least that
	# counts as watching (a worker's turn lasts longer than that)
	cmp_ok($r->{rate}, '>=', 20, "$what: sampled at least every 50 ms on average");
	cmp_ok($r->{max_workers}, '<=', 2,
		"$what: never more than sbqueue.max_workers = 2 maintenance workers (and their parallel workers) in pg_stat_activity");
	cmp_ok($r->{max_status_workers}, '<=', 2,
		"$what: never more than 2 worker_pid in sbq_maintenance_status");
	is("$r->{min_launchers}..$r->{max_launchers}", '1..1', "$what: exactly one launcher in every sample");
}

my $workers_sql = q{
	SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'sbqueue maintenance'};
my $launcher_sql = q{
	SELECT coalesce(string_agg(pid::text, ','), '')
	  FROM pg_stat_activity WHERE backend_type = 'sbqueue launcher'};

# A parallel query in db01 that plans 4 workers: the workers it launched, and
# how many sbqueue maintenance workers ran just before it.
my $par;
sub parallel_probe
{
	my $busy = $par->query_safe($workers_sql);
	my $plan = $par->query_safe(
		'EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF) SELECT count(*) FROM big');
	my ($planned) = $plan =~ /Workers Planned: (\d+)/;
	my ($launched) = $plan =~ /Workers Launched: (\d+)/;
	return { busy => $busy, planned => $planned // 0, launched => $launched // 0 };
}

# --- a restart: the launcher starts from an empty registry, as at boot
$node->restart;
my $logstart = -s $node->logfile;
ok($node->poll_query_until('postgres',
		"SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'sbqueue launcher'", '1'),
	'the launcher runs after the restart');
is($node->safe_psql('db01', qq{
	SELECT ($workers_sql) || '/' || (SELECT count(*) FROM sbq_maintenance_status
	                                  WHERE state = 'installed' OR passes > 0)}),
	'0/0', 'with the workers off nothing has looked at any database yet');

# The sampler watches before the pool starts, so that it sees the start-up
# look from its first moment: the launcher, already running, is told by
# SIGHUP, which is the same as its start-up with the workers on (every
# database unknown, every one due at once).
my $boot = start_sampler('boot', \@dbs, '10 s', '70 s');
$par = $node->background_psql('db01');
# the timeout is per query: the session lives through the phases that follow
$par->set_query_timer_restart;
$par->query_safe('SET parallel_setup_cost = 0; SET parallel_tuple_cost = 0; '
	  . 'SET min_parallel_table_scan_size = 0; SET max_parallel_workers_per_gather = 4');

# DEBUG1 during the start-up look: every worker says when it leaves, and after
# how many ticks
$node->safe_psql('postgres', 'ALTER SYSTEM SET log_min_messages = debug1');
$node->safe_psql('postgres', 'ALTER SYSTEM SET sbqueue.enable_maintenance_worker = on');
my $t_on = time;
$node->safe_psql('postgres', 'SELECT pg_reload_conf()');

# --- a parallel query while the pool takes turns through the databases
# max_worker_processes = 8: the logical replication launcher takes 1, the
# sbqueue launcher 1 and its workers at most 2, so 4 are left, and the query
# plans exactly 4. One more slot held by sbqueue (a third worker, or a worker
# that the launcher replaced before the postmaster had freed its slot) makes
# it launch fewer. The probes run during the start-up look (a few seconds)
# and while the workers take turns after it. Both workers run in only a third
# to a half of that time (on a loaded machine, where the passes that follow the
# look are short, far less: one CI run saw both up in 35 of 987 samples), so
# the probes come every 250 ms, and every 50 ms once 8 have run, until one of
# them has run with both sbqueue workers up, or 20 s have gone by (the
# sampler watches for 10 s at least, and 70 s at most).
my @probes;
my $probe_start = time;
while (@probes < 8
	|| (!grep { $_->{busy} == 2 } @probes) && time - $probe_start < 20)
{
	push @probes, parallel_probe();
	usleep(@probes < 8 ? 250_000 : 50_000);
}
my $br = finish_sampler($boot, 0);
$node->safe_psql('postgres', 'ALTER SYSTEM RESET log_min_messages; SELECT pg_reload_conf()');

is(join(' ', map { "$_->{planned}/$_->{launched}" } @probes),
	join(' ', ('4/4') x @probes),
	'every parallel query launched the 4 workers it planned (workers planned/launched)')
  or diag('sbqueue workers before each probe: ' . join(' ', map { $_->{busy} } @probes));
ok((grep { $_->{busy} == 2 } @probes) > 0,
	'at least one parallel query ran while both sbqueue workers held their slots')
  or diag('sbqueue workers before each probe: ' . join(' ', map { $_->{busy} } @probes));

# A worker the launcher starts runs a tick before it makes room for another
# database: asked to leave before that, it was started for nothing, and its
# database waits for another one (a restart delay, then a fork and a
# connection).
my $bootlog = slurp_file($node->logfile, $logstart);
my @leaves = $bootlog =~ /sbqueue maintenance worker leaves database "([^"]+)" after 0 ticks/g;
my @starts = $bootlog =~ /starting background worker process "sbqueue maintenance worker for/g;
diag(sprintf('start-up: %d maintenance workers started, %d left without a tick', scalar @starts,
		scalar @leaves));
cmp_ok(scalar @starts, '>=', 30, 'start-up: the log shows the worker starts (DEBUG1)');
is(join(',', @leaves), '', 'start-up: no worker left its database before its first tick');

# --- every database gets a pass, within a bound, after the restart
# 32 looks (30 databases, noext and postgres), each a fork, a connection and
# one pass, two at a time: some 2 s here (2.5 s with both CPUs busy). 30 s
# leaves room for a slower or loaded machine, and is missed by a launcher that
# waits out its 10 s nap or an idle back-off between two turns.
ok($br->{all_passed} ne '', 'all 30 databases were installed with a good pass before the sampler gave up');
my $boot_time = $br->{all_passed} ne '' ? $br->{all_passed} - $t_on : 999;
diag(sprintf('all 30 databases had a pass %.2f s after the pool was turned on', $boot_time));
cmp_ok($boot_time, '<', 30, 'every database is installed with passes >= 1 within 30 s of the start');
pool_bounds_hold($br, 'start-up');
cmp_ok($br->{full_samples}, '>', 0, 'start-up: the pool was seen using both of its workers');
cmp_ok($br->{noext_visits}, '<=', 1, 'start-up: noext was looked at once at most');
is($node->safe_psql('db01',
		q{SELECT coalesce(string_agg(database, ','), '') FROM sbq_maintenance_status WHERE database !~ '^db[0-9]{2}$'}),
	'', 'the databases without sbqueue (postgres, noext) are not listed once looked at');
is($node->safe_psql('db01', q{SELECT count(*) FROM sbq_maintenance_status WHERE state = 'installed'}),
	'30', 'sbq_maintenance_status lists the 30 databases as installed');

# --- the steady state: locks expire, a database comes, another goes
my $steady = start_sampler('steady', [], '0', '180 s');

# an over-delivered message in each of five databases: received once under a
# 5 s lock on its last allowed delivery; nobody calls receive again
my %locked_until;
for my $db (@expiry_dbs)
{
	my @out = split /\n/, $node->safe_psql($db, q{
		SELECT sbq_create_queue('poison', lock_duration => '5 s', max_delivery_count => 1);
		SELECT sbq_send('poison', 'poison');
		SELECT locked_until FROM sbq_receive('poison');
	});
	$locked_until{$db} = $out[-1];
}
# more parallel queries while those databases come due
my @later_probes = map { parallel_probe() } 1 .. 3;
is(join(' ', map { "$_->{planned}/$_->{launched}" } @later_probes), '4/4 4/4 4/4',
	'parallel queries while locks come due also get their 4 workers');

# The launcher sees the expiry in shared memory: the database goes first, and
# a sleeping worker makes room. A worker start is a fork and a connection
# (some 0.2 s here); 5 s is well within an idle database's back-off by now.
# dead_lettered_at (an internal column) is when the pass moved the message.
for my $db (@expiry_dbs)
{
	ok($node->poll_query_until($db,
			q{SELECT count(*) FROM sbq_peek('poison/$deadletterqueue', 10)
			   WHERE dead_letter_reason = 'MaxDeliveryCountExceeded'}, '1'),
		"$db: the over-delivered message is dead-lettered with no receive call");
	my $delay = $node->safe_psql($db,
		"SELECT extract(epoch FROM max(dead_lettered_at) - '$locked_until{$db}'::timestamptz) FROM sbq.dead_letters");
	diag(sprintf('%s: dead-lettered %.2f s after its lock expired', $db, $delay));
	ok($delay >= 0 && $delay < 5, "$db: dead-lettered after its lock expired, within 5 s of it");
}

# a database created while the launcher runs: looked at, found without
# sbqueue; then CREATE EXTENSION, whose commit tells the launcher
$node->safe_psql('postgres', 'CREATE DATABASE newdb');
# the launcher rescans at once (the commit says so) and looks: 'unknown'
# until then, after that not listed (a later look would not change that)
usleep(2_000_000);
ok($node->poll_query_until('db01', q{SELECT count(*) FROM sbq_maintenance_status WHERE database = 'newdb'}, '0'),
	'a new database without sbqueue is not listed once looked at');
my $t_ext = time;
$node->safe_psql('newdb', 'CREATE EXTENSION sbqueue');
ok($node->poll_query_until('db01', q{
		SELECT count(*) FROM sbq_maintenance_status
		 WHERE database = 'newdb' AND state = 'installed' AND passes >= 1 AND last_pass_result = 'ok'},
		'1'),
	'a database created later is installed with a pass after CREATE EXTENSION');
my $pickup = time - $t_ext;
diag(sprintf('newdb had its first pass %.2f s after CREATE EXTENSION', $pickup));
# an installed database is due at once; waiting for a slot is one worker
# leaving and another starting (well under a second here)
cmp_ok($pickup, '<', 10, 'within 10 s of CREATE EXTENSION');

# a database dropped while a worker runs there: a message sent there makes it
# due, the drop starts the moment its worker shows up (wait_for_worker), and
# without FORCE it must not wait for that worker or fail. With more databases
# than slots a worker leaves right after its tick, which a loaded machine's
# sampling can miss: then another message makes it due again (at most 3 times).
$node->safe_psql($dropped, q{SELECT sbq_create_queue('q')});
my $dropped_oid = $node->safe_psql('postgres', "SELECT oid FROM pg_database WHERE datname = '$dropped'");
my $t_drop = time;
my ($rc, $out, $err);
for my $attempt (1 .. 3)
{
	$node->safe_psql($dropped, q{SELECT sbq_send('q', 'x')});
	($rc, $out, $err) = $node->psql('postgres', qq{
		SELECT p AS pid, p IS NOT NULL AS found FROM wait_for_worker('$dropped', '15 s') p \\gset
		\\if :found
		DROP DATABASE $dropped;
		\\echo :pid
		\\endif});
	last if $out =~ /^\d+$/ || $rc != 0;
	diag("attempt $attempt: no worker seen in $dropped within 15 s; sending again");
}
is($rc, 0, "DROP DATABASE $dropped (without FORCE) succeeds") or diag($err);
like($out, qr/^\d+$/, "a worker ran in $dropped when DROP DATABASE began");
diag(sprintf('the worker showed up and the drop was done in %.2f s', time - $t_drop));
is($node->safe_psql('db01', "SELECT count(*) FROM sbq_maintenance_status WHERE database_id = $dropped_oid"),
	'0', 'the dropped database is gone from sbq_maintenance_status');
usleep(2_000_000);    # time for a launcher that did not forget it to try
is($node->safe_psql('db01', q{SELECT count(*) FROM sbq_maintenance_status WHERE state = 'installed'}),
	'30', 'sbq_maintenance_status lists 30 databases (29 and newdb)');

# --- a crash of a worker in the middle of a pass: nothing lost
# Two queues in db30, each with 3000 messages received once (the last
# allowed delivery) under a 5 s lock: "rowlocks" received with
# sbqueue.memory_locks = off (its locks and delivery counts are in the message
# rows, so maintenance must dead-letter every one of them, even after a
# crash), "leases" with the locks in shared memory (a crash loses them and
# their delivery counts, as API.md allows: those messages are delivered
# again; what maintenance dead-lettered and committed stays dead-lettered).
$node->safe_psql($crash_db, q{
	SELECT sbq_create_queue('rowlocks', lock_duration => '5 s', max_delivery_count => 1);
	SELECT sbq_create_queue('leases', lock_duration => '5 s', max_delivery_count => 1);
	SELECT count(*) FROM sbq_send_batch('rowlocks', ARRAY(SELECT 'r' || g FROM generate_series(1, 3000) g));
	SELECT count(*) FROM sbq_send_batch('leases', ARRAY(SELECT 'l' || g FROM generate_series(1, 3000) g));
});
is($node->safe_psql($crash_db, q{
	SET sbqueue.memory_locks = off;
	SELECT count(*) FROM sbq_receive('rowlocks', 3000);
	RESET sbqueue.memory_locks;
	SELECT count(*) FROM sbq_receive('leases', 3000);
}), "3000\n3000", 'all 6000 messages received once');
is($node->safe_psql($crash_db, q{
	SELECT string_agg(q.name || ' ' || (SELECT count(m.lock_token) FROM sbq.messages m
	                                     WHERE m.queue_id = q.queue_id), ', ' ORDER BY q.name)
	  FROM sbq.queues q}),
	'leases 0, rowlocks 3000', 'the rowlocks locks are in the rows, the leases ones in shared memory');

# A pass dead-letters at most 1000 messages a step, so this takes passes. To
# be sure the worker dies inside one, after it has moved messages in that
# pass's transaction: an open transaction here inserts the dead letter of the
# last rowlocks message first (never committed; the crash ends it), so the
# pass that comes to that message waits on its unique key. By then the pass
# has taken up to 1000 expired leases and the rowlocks messages before it.
my $blocker = $node->background_psql($crash_db);
$blocker->query_safe(q{
	BEGIN;
	INSERT INTO sbq.dead_letters (sequence_number, queue_id, subqueue, state, delivery_count,
	                              enqueued_time, message_id, body, dead_lettered_at)
	SELECT m.sequence_number, m.queue_id, 1, 0, m.delivery_count, m.enqueued_time, m.message_id,
	       m.body, now()
	  FROM sbq.messages m
	 WHERE m.sequence_number = (SELECT max(n.sequence_number) FROM sbq.messages n
	                             JOIN sbq.queues q ON q.queue_id = n.queue_id
	                            WHERE q.name = 'rowlocks');
});
ok($node->poll_query_until('postgres', qq{
		SELECT count(*) FROM pg_stat_activity
		 WHERE backend_type = 'sbqueue maintenance' AND datname = '$crash_db'
		   AND state = 'active' AND wait_event_type = 'Lock'}, '1'),
	"a maintenance worker in $crash_db is stopped in the middle of a pass");
my ($victim, $victim_query) = split /\|/, $node->safe_psql('postgres', qq{
	SELECT pid, query FROM pg_stat_activity
	 WHERE backend_type = 'sbqueue maintenance' AND datname = '$crash_db'});
like($victim_query, qr/sbq_maintain\(\)/, 'it is running sbq_maintain()');
# what earlier passes committed (this session cannot see the stopped pass)
my %before = map { split / / } split /\n/, $node->safe_psql($crash_db,
	q{SELECT queue || ' ' || dead_letter_count FROM sbq_queue_stats ORDER BY queue});
diag("committed before the crash: rowlocks $before{rowlocks}, leases $before{leases} dead letters");

# everything before the crash, and the log up to it
my $st = finish_sampler($steady, 1);
pool_bounds_hold($st, 'steady state');
is($st->{noext_visits}, 0, 'steady state: no worker ever visits noext after the start-up look');
$par->quit;
my $log = slurp_file($node->logfile, $logstart);
unlike($log, qr/database "[^"]*" does not exist|database \d+ does not exist/,
	'no worker tried to connect to a dropped database');
my @bad = grep { /\b(ERROR|PANIC|WARNING):/ && !/canceling autovacuum task/ } split /\n/, $log;
is(scalar @bad, 0, 'no ERROR, WARNING or PANIC in the log since the restart (no worker error, '
	  . 'no launcher short of worker slots)')
  or diag(join("\n", @bad[ 0 .. ($#bad < 9 ? $#bad : 9) ]));

my $launcher_before = $node->safe_psql('postgres', $launcher_sql);
my $logcrash = -s $node->logfile;
my $t_kill = time;
kill 'KILL', $victim;
eval { $blocker->quit };

# the postmaster takes a killed backend as a crash: every process ends,
# shared memory is made again (the registry and the leases with it), and the
# launcher starts again
ok(SbqNode::poll_until($node, 'postgres',
		"SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'sbqueue launcher' AND pid <> $launcher_before",
		'1'),
	'after the kill the server crash-restarts and a new launcher runs');
my $t_back = time;
my $after = start_sampler('after', [ grep { $_ ne $dropped } @dbs, 'newdb' ], '3 s', '70 s');
$log = slurp_file($node->logfile, $logcrash);
like($log, qr/\(PID $victim\) was terminated by signal 9/, 'the log shows the worker killed by signal 9');
like($log, qr/all server processes terminated; reinitializing/, 'and the crash-restart');

# a consistent look at both sub-queues of each queue (one snapshot)
sub messages_and_dead_letters
{
	my ($queue) = @_;
	return $node->safe_psql($crash_db, qq{
		BEGIN ISOLATION LEVEL REPEATABLE READ;
		SELECT count(*) || ' ' || count(DISTINCT sequence_number)
		       || ' ' || count(*) FILTER (WHERE dlq)
		  FROM (SELECT sequence_number, false AS dlq FROM sbq_peek('$queue', 5000)
		        UNION ALL
		        SELECT sequence_number, true FROM sbq_peek('$queue/\$deadletterqueue', 5000)) s;
		COMMIT;
	});
}

for my $queue (qw(rowlocks leases))
{
	my ($n, $distinct, $dlq) = split / /, messages_and_dead_letters($queue);
	is("$n $distinct", '3000 3000',
		"$queue right after the crash: queue + dead letters hold all 3000 messages, each once");
	cmp_ok($dlq, '>=', $before{$queue}, "$queue: what earlier passes dead-lettered is still dead-lettered");
}

# rowlocks: every lock in the rows has expired on its last delivery, so
# maintenance must dead-letter all 3000 after the crash: the start-up look
# (a few seconds for the 31 databases, as above) and three passes in db30
ok($node->poll_query_until($crash_db, q{
		SELECT active_count + locked_count + deferred_count + scheduled_count || ' ' || dead_letter_count
		  FROM sbq_queue_stats WHERE queue = 'rowlocks'}, '0 3000'),
	'rowlocks: all 3000 messages are dead-lettered after the crash');
my $drain = time - $t_back;
diag(sprintf('rowlocks was drained %.2f s after the server was back', $drain));
cmp_ok($drain, '<', 30, 'within 30 s of the server being back');
is($node->safe_psql($crash_db, q{
	SELECT count(*) || ' ' || count(DISTINCT sequence_number) || ' ' || count(DISTINCT body)
	       || ' ' || count(*) FILTER (WHERE dead_letter_reason = 'MaxDeliveryCountExceeded'
	                                 AND delivery_count = 1)
	  FROM sbq_peek('rowlocks/$deadletterqueue', 5000)}),
	'3000 3000 3000 3000',
	'rowlocks: 3000 distinct dead letters, each MaxDeliveryCountExceeded after 1 delivery');

# leases: the messages not dead-lettered lost their lease in the crash; they
# are in the queue, unlocked, for the next receive
my ($n, $distinct, $dlq) = split / /, messages_and_dead_letters('leases');
is("$n $distinct", '3000 3000', 'leases after maintenance ran again: still all 3000 messages, each once');
is($node->safe_psql($crash_db, q{
	SELECT active_count + dead_letter_count || ' ' || locked_count
	  FROM sbq_queue_stats WHERE queue = 'leases'}),
	'3000 0', 'leases: every message is either dead-lettered or receivable again');
diag("leases after the crash: $dlq dead letters, " . (3000 - $dlq) . ' delivered again');

# --- the pool after the crash
my $ar = finish_sampler($after, 0);
ok($ar->{all_passed} ne '', 'after the crash all 30 databases get a good pass again');
my $crash_time = $ar->{all_passed} ne '' ? $ar->{all_passed} - $t_kill : 999;
diag(sprintf('all 30 databases had a pass %.2f s after the kill', $crash_time));
# the crash-restart itself (a second or two) and the start-up look as above
cmp_ok($crash_time, '<', 30, 'within 30 s of the kill');
pool_bounds_hold($ar, 'after the crash');
cmp_ok($ar->{noext_visits}, '<=', 1, 'after the crash: noext was looked at once at most');

$node->stop;
done_testing();
