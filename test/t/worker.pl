# Copyright (c) 2026, the sbqueue authors
#
# The maintenance launcher and its workers (sbqueue preloaded), with as many
# worker slots (sbqueue.max_workers) as databases, so that each database keeps
# its worker between passes (worker_pool.pl has fewer slots than databases):
# one worker in every database that has the extension and in none that has
# not, a database created later included; a worker dead-letters an
# over-delivered message with no receive call; SIGHUP (turning the worker off
# and on again, changing the interval), SIGTERM (of a worker and of the
# launcher) and a crash-restart of the server; DROP DATABASE, ALTER DATABASE
# RENAME, CREATE DATABASE ... TEMPLATE, DROP EXTENSION and CREATE EXTENSION
# while workers run.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use IPC::Run;
use FindBin;
use lib "$FindBin::RealBin/../harness";
use SbqNode;

my $node = PostgreSQL::Test::Cluster->new('worker');
$node->init;
$node->append_conf(
	'postgresql.conf', qq(
shared_preload_libraries = 'sbqueue'
max_worker_processes = 16
sbqueue.max_workers = 8
restart_after_crash = on
log_statement = none
));
$node->start;

my $workers_sql = q{
	SELECT coalesce(string_agg(datname, ',' ORDER BY datname), '')
	  FROM pg_stat_activity WHERE backend_type = 'sbqueue maintenance'};
my $launcher_sql = q{
	SELECT coalesce(string_agg(pid::text, ','), '')
	  FROM pg_stat_activity WHERE backend_type = 'sbqueue launcher'};

# Wait until the maintenance workers run in exactly the databases listed
# (comma-separated, sorted).
sub workers_are
{
	my ($expected, $name) = @_;
	local $Test::Builder::Level = $Test::Builder::Level + 1;
	ok($node->poll_query_until('postgres', $workers_sql, $expected), $name)
	  or diag('workers: ' . $node->safe_psql('postgres', $workers_sql));
}

sub worker_pid
{
	my ($db) = @_;
	return $node->safe_psql('postgres',
		"SELECT pid FROM pg_stat_activity WHERE backend_type = 'sbqueue maintenance' AND datname = '$db'"
	);
}

# A queue with one message delivered once, under a 5 s lock, on its last
# allowed delivery: once the lock runs out, maintenance must dead-letter it.
sub over_delivered_message
{
	my ($db, $queue) = @_;
	$node->safe_psql($db, qq{
		SELECT sbq_create_queue('$queue', lock_duration => '5 s', max_delivery_count => 1);
		SELECT sbq_send('$queue', 'poison');
		SELECT count(*) FROM sbq_receive('$queue');
	});
}

sub dead_letters
{
	my ($db, $queue) = @_;
	return $node->safe_psql($db,
		"SELECT count(*) FROM sbq_peek('$queue/\$deadletterqueue', 10) WHERE dead_letter_reason = 'MaxDeliveryCountExceeded'"
	);
}

# --- start: a worker in every database that has the extension, none elsewhere
$node->safe_psql('postgres', 'CREATE DATABASE db1');
$node->safe_psql('postgres', 'CREATE DATABASE db2');
$node->safe_psql('postgres', 'CREATE DATABASE noext');
$node->safe_psql('db1', 'CREATE EXTENSION sbqueue');
$node->safe_psql('db2', 'CREATE EXTENSION sbqueue');

ok($node->poll_query_until('postgres', "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'sbqueue launcher'", '1'),
	'one launcher runs');
workers_are('db1,db2', 'a worker in each database with sbqueue, none in the others');
usleep(1_500_000);
is($node->safe_psql('postgres', $workers_sql), 'db1,db2',
	'no worker comes back in the database without sbqueue');

# a database created later, with the extension created later still
$node->safe_psql('postgres', 'CREATE DATABASE db3');
# the launcher may look at db3 once (a worker that finds no sbqueue and
# leaves at once); none stays
workers_are('db1,db2', 'no worker in a new database without sbqueue');
usleep(1_500_000);
is($node->safe_psql('postgres', $workers_sql), 'db1,db2', '... and none comes back');
my $t0 = time;
$node->safe_psql('db3', 'CREATE EXTENSION sbqueue');
workers_are('db1,db2,db3', 'a worker starts in a database created later, after CREATE EXTENSION');
cmp_ok(time - $t0, '<', 10, 'CREATE EXTENSION is noticed at once (not by a periodic rescan)');

# --- an extension version without sbq_maintain(): one WARNING, no crash, no
# spinning; ALTER EXTENSION UPDATE brings the function, and the worker uses it
# at once instead of finishing its back-off
my $sharedir = `pg_config --sharedir`;
chomp $sharedir;
my $old_script = "$sharedir/extension/sbqueue--0.1.sql";
SKIP:
{
	skip 'no installed sbqueue 0.1 without sbq_maintain()', 6
	  unless -f $old_script && slurp_file($old_script) !~ /sbq_maintain/;
	# a long interval, so that a back-off (2, 4, ... intervals) cannot be
	# mistaken for the prompt reaction to ALTER EXTENSION UPDATE below,
	# however slow the machine
	$node->safe_psql('postgres', "ALTER SYSTEM SET sbqueue.maintenance_interval = '10s'");
	$node->reload;
	my $logpos = -s $node->logfile;
	$node->safe_psql('postgres', 'CREATE DATABASE old');
	$node->safe_psql('old', "CREATE EXTENSION sbqueue VERSION '0.1'");
	workers_are('db1,db2,db3,old', 'a worker starts where the extension lacks sbq_maintain()');
	my $pid = worker_pid('old');
	usleep(3_500_000);
	is(worker_pid('old'), $pid, 'it neither crashes nor restarts');
	my @warnings = (slurp_file($node->logfile, $logpos) =~ /WARNING:  sbqueue maintenance worker found no sbq_maintain\(\) in database "old"/g);
	is(scalar @warnings, 1, 'it logs exactly one WARNING for the database');
	my $t_update = time;
	$node->safe_psql('old', 'ALTER EXTENSION sbqueue UPDATE');
	ok($node->poll_query_until('postgres',
			"SELECT count(*) FROM pg_stat_activity WHERE pid = $pid AND query LIKE '%sbq_maintain()%'", '1'),
		'after ALTER EXTENSION UPDATE the same worker calls sbq_maintain()');
	# the commit wakes the worker before its catalog invalidations are sent:
	# the worker looks again a few times at short intervals (worker.c)
	cmp_ok(time - $t_update, '<', 10, 'at once, not after its back-off (20 s or more by now)');
	$node->safe_psql('postgres', 'ALTER SYSTEM RESET sbqueue.maintenance_interval');
	$node->reload;
	$node->safe_psql('postgres', 'DROP DATABASE old');
	workers_are('db1,db2,db3', 'back to the three databases');
}

# --- SIGHUP: workers keep running when a setting changes
my %pid_before = map { $_ => worker_pid($_) } qw(db1 db2 db3);
$node->safe_psql('postgres', "ALTER SYSTEM SET sbqueue.maintenance_interval = '500ms'");
$node->reload;
usleep(1_500_000);
is(worker_pid($_), $pid_before{$_}, "the worker of $_ survives SIGHUP") for qw(db1 db2 db3);
is($node->safe_psql('db1', 'SHOW sbqueue.maintenance_interval'), '500ms', 'the new interval is in effect');

# --- turned off with SIGHUP: no worker, and nothing maintained
$node->safe_psql('postgres', 'ALTER SYSTEM SET sbqueue.enable_maintenance_worker = off');
$node->reload;
workers_are('', 'sbqueue.enable_maintenance_worker = off stops the workers');
like($node->safe_psql('postgres', $launcher_sql), qr/^\d+$/, 'the launcher stays, idle');

over_delivered_message('db1', 'poison');
usleep(7_000_000);    # the lock (5 s) has run out
is(dead_letters('db1', 'poison'), '0', 'with the worker off, nothing dead-letters the message');
is($node->safe_psql('db1', "SELECT count(*) FROM sbq_peek('poison')"), '1',
	'the over-delivered message is still in the queue');

# --- turned on again: the worker dead-letters it, and nobody calls receive
$node->safe_psql('postgres', 'ALTER SYSTEM RESET sbqueue.enable_maintenance_worker');
$node->reload;
workers_are('db1,db2,db3', 'turned on again, the workers come back');
ok($node->poll_query_until('db1', "SELECT count(*) FROM sbq_peek('poison/\$deadletterqueue', 10) WHERE dead_letter_reason = 'MaxDeliveryCountExceeded'", '1'),
	'the worker dead-letters the over-delivered message with no receive call');
is($node->safe_psql('db1', "SELECT count(*) FROM sbq_peek('poison')"), '0', 'and it left the queue');
like($node->safe_psql('postgres',
		"SELECT query FROM pg_stat_activity WHERE backend_type = 'sbqueue maintenance' AND datname = 'db1'"),
	qr/^SELECT public\.sbq_maintain\(\)$/, 'the worker calls the schema-qualified sbq_maintain()');

# --- SIGTERM of a worker: the launcher starts another
my $old = worker_pid('db2');
$node->safe_psql('postgres', "SELECT pg_terminate_backend($old)");
ok($node->poll_query_until('postgres',
		"SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'sbqueue maintenance' AND datname = 'db2' AND pid <> $old",
		'1'),
	'a terminated worker is replaced');
workers_are('db1,db2,db3', 'one worker per database after a worker was terminated');

# --- SIGTERM of the launcher: the postmaster restarts it, it adopts the workers
my $launcher = $node->safe_psql('postgres', $launcher_sql);
%pid_before = map { $_ => worker_pid($_) } qw(db1 db2 db3);
$node->safe_psql('postgres', "SELECT pg_terminate_backend($launcher)");
ok($node->poll_query_until('postgres',
		"SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'sbqueue launcher' AND pid <> $launcher", '1'),
	'a terminated launcher is started again');
usleep(1_500_000);
is($node->safe_psql('postgres', $workers_sql), 'db1,db2,db3', 'still exactly one worker per database');
is(worker_pid($_), $pid_before{$_}, "the new launcher adopted the worker of $_") for qw(db1 db2 db3);

# --- DDL that needs the database to itself, while a worker runs there
my $logstart = -s $node->logfile;
like(worker_pid('db2'), qr/^\d+$/, 'a worker runs in db2');
$t0 = time;
my ($rc, $out, $err) = $node->psql('postgres', 'DROP DATABASE db2');
is($rc, 0, 'DROP DATABASE succeeds while its worker runs') or diag($err);
cmp_ok(time - $t0, '<', 4, 'DROP DATABASE did not wait for the worker');
workers_are('db1,db3', 'no worker for the dropped database');

($rc, $out, $err) = $node->psql('postgres', 'ALTER DATABASE db3 RENAME TO db3r');
is($rc, 0, 'ALTER DATABASE RENAME succeeds while its worker runs') or diag($err);
workers_are('db1,db3r', 'the worker comes back in the renamed database');

($rc, $out, $err) = $node->psql('postgres', 'CREATE DATABASE db4 TEMPLATE db1');
is($rc, 0, 'CREATE DATABASE ... TEMPLATE succeeds while the template\'s worker runs') or diag($err);
workers_are('db1,db3r,db4', 'workers in the template and in its copy');

($rc, $out, $err) = $node->psql('postgres', 'DROP DATABASE db4 WITH (FORCE)');
is($rc, 0, 'DROP DATABASE WITH (FORCE) succeeds') or diag($err);
workers_are('db1,db3r', 'no worker for the force-dropped database');

# --- DROP EXTENSION and CREATE EXTENSION while the worker runs
($rc, $out, $err) = $node->psql('db1', 'DROP EXTENSION sbqueue');
is($rc, 0, 'DROP EXTENSION succeeds while the worker runs') or diag($err);
workers_are('db3r', 'the worker leaves a database whose extension was dropped');
$node->safe_psql('db1', 'CREATE EXTENSION sbqueue');
workers_are('db1,db3r', 'and comes back with CREATE EXTENSION');

my $log = slurp_file($node->logfile, $logstart);
unlike($log, qr/database \d+ does not exist|database "db\d+" does not exist/,
	'no worker tried to connect to a dropped database');
unlike($log, qr/sbqueue.*(ERROR|PANIC)|(ERROR|PANIC).*sbqueue/, 'no worker error in the log');

# --- DROP and CREATE EXTENSION again and again under a worker that passes
# every 10 ms: a pass that found sbq_maintain() just before a drop committed
# skips, where it failed on its first statement (relation "sbq.queues" does
# not exist: about one round in three), or on its parse (function
# sbq_maintain() does not exist: a few rounds in a thousand, so SBQ_DROP_ROUNDS
# sets the number of rounds, 40 by default)
$logstart = -s $node->logfile;
$node->safe_psql('postgres', q{
	ALTER SYSTEM SET sbqueue.maintenance_interval = '10ms';
	ALTER SYSTEM SET sbqueue.idle_maintenance_interval = '10ms';
	SELECT pg_reload_conf();});
my $drop_rounds = $ENV{SBQ_DROP_ROUNDS} || 40;
for my $round (1 .. $drop_rounds)
{
	$node->safe_psql('db1', q{
		DROP EXTENSION sbqueue;
		CREATE EXTENSION sbqueue;
		SELECT sbq_create_queue('churn');
		SELECT sbq_send('churn', 'x'::text);});
	usleep(20_000);
}
$log = slurp_file($node->logfile, $logstart);
unlike($log, qr/ERROR/, "no pass fails while the extension is dropped and created $drop_rounds times");

# --- a drop held open until a pass waits on it, then committed: the pass had
# found the extension and its sbq_maintain() before the drop committed, and
# skips (it failed: function sbq_maintain() does not exist, or a relation of
# the dropped extension gone). Alone, the worker leaves the database; with a
# CREATE EXTENSION in the same transaction, it maintains the new one.
for my $case (['DROP EXTENSION sbqueue', 'db3r', 'a drop'],
	['DROP EXTENSION sbqueue; CREATE EXTENSION sbqueue', 'db1,db3r', 'a drop and a create'])
{
	my ($sql, $after, $what) = @$case;
	$logstart = -s $node->logfile;
	my $dropper = $node->background_psql('db1');
	$dropper->query_safe("BEGIN; $sql;");
	ok( $node->poll_query_until('db1', q{
			SELECT count(*) > 0 FROM pg_stat_activity
			 WHERE backend_type = 'sbqueue maintenance' AND datname = 'db1' AND wait_event_type = 'Lock'}),
		"a pass waits on $what held open");
	$dropper->query_safe('COMMIT');
	$dropper->quit;
	workers_are($after, "... which commits: the worker is in $after");
	usleep(200_000);
	$log = slurp_file($node->logfile, $logstart);
	unlike($log, qr/ERROR/, '... and no pass failed');
	$node->safe_psql('db1', 'CREATE EXTENSION IF NOT EXISTS sbqueue');
	workers_are('db1,db3r', '... and a worker maintains db1 again');
}

# --- the same drop, made certain: the worker is held by a debugger where its
# pass calls SPI_prepare, after its look for the extension and sbq_maintain();
# a function created before the pass makes its parse read pg_proc afresh, and
# so take in the drop. The drop now waits for the pass and the pass fails on
# nothing (before, the drop committed at once and the pass failed: function
# public.sbq_maintain() does not exist). Skipped where no debugger can attach.
SKIP:
{
	my $gdb = `command -v gdb 2>/dev/null`;
	chomp $gdb;
	skip 'no debugger (gdb) to hold the worker', 5 unless $gdb;
	my $dir = PostgreSQL::Test::Utils::tempdir();
	my $pid = $node->safe_psql('postgres',
		q{SELECT pid FROM pg_stat_activity WHERE backend_type = 'sbqueue maintenance' AND datname = 'db1'});
	my $wait = sub { "shell while [ ! -f $dir/$_[0] ]; do sleep 0.05; done\n" };
	open(my $fh, '>', "$dir/cmds") or die;
	print $fh "set pagination off\nshell touch $dir/attached\n", $wait->('created'),
	  "break SPI_prepare\ncontinue\nshell touch $dir/held\n", $wait->('dropping'),
	  "delete\ndetach\nquit\n";
	close $fh;
	my ($gout, $dout) = ('', '');
	my $g = IPC::Run::start([ $gdb, '-p', $pid, '-batch', '-x', "$dir/cmds" ],
		'>', \$gout, '2>&1', IPC::Run::timeout(120));
	my $attached = 0;
	for (1 .. 600)
	{
		$attached = -f "$dir/attached" and last;
		last unless $g->pumpable;
		usleep(50_000);
	}
	if (!$attached || $gout =~ /ptrace|not permitted/i)
	{
		system('touch', "$dir/created", "$dir/dropping");
		eval { $g->finish };
		skip "the debugger cannot attach here: $gout", 5;
	}
	$logstart = -s $node->logfile;
	$node->safe_psql('db1', q{CREATE FUNCTION public.other_fn() RETURNS int LANGUAGE sql AS 'SELECT 1'});
	system('touch', "$dir/created");
	# a pass comes within a second or so (10 ms intervals); a minute at most
	for (1 .. 1200)
	{
		last if -f "$dir/held" || !$g->pumpable;
		usleep(50_000);
	}
	if (!ok(-f "$dir/held", '... the debugger holds a pass where it parses its call'))
	{
		diag($gout);
		$g->kill_kill;
		skip 'no pass was held', 4;
	}
	my $drop = IPC::Run::start([ 'psql', '-X', '-d', $node->connstr('db1'), '-c', 'DROP EXTENSION sbqueue' ],
		'>', \$dout, '2>&1', IPC::Run::timeout(120));
	# the drop has committed, or waits for a lock
	$node->poll_query_until('db1', q{
		SELECT NOT EXISTS (SELECT FROM pg_extension WHERE extname = 'sbqueue')
		    OR EXISTS (SELECT FROM pg_stat_activity WHERE query = 'DROP EXTENSION sbqueue' AND wait_event_type = 'Lock')});
	system('touch', "$dir/dropping");
	$g->finish;
	ok($drop->finish, 'a drop while the worker is held between its look and its parse succeeds')
	  or diag($dout);
	workers_are('db3r', '... the worker leaves');
	$log = slurp_file($node->logfile, $logstart);
	unlike($log, qr/ERROR/, '... and its pass did not fail');
	$node->safe_psql('db1', 'CREATE EXTENSION sbqueue');
	workers_are('db1,db3r', '... and a worker maintains db1 again');
}
# --- a transaction that locks sbq.queues, so that a pass waits on it, and
# then drops the extension: the drop succeeds and the pass skips. The pass
# held the extension's lock while it waited (a deadlock: after
# deadlock_timeout the drop, or the pass, failed).
for my $pause (0.3, 1.5)
{
	$logstart = -s $node->logfile;
	my $locker = $node->background_psql('db1', on_error_stop => 0);
	$locker->query_safe('BEGIN; LOCK TABLE sbq.queues IN ACCESS EXCLUSIVE MODE;');
	ok( $node->poll_query_until('db1', q{
			SELECT count(*) > 0 FROM pg_stat_activity
			 WHERE backend_type = 'sbqueue maintenance' AND datname = 'db1'
			   AND wait_event_type = 'Lock' AND wait_event = 'relation'}),
		"a pass waits on sbq.queues locked by a transaction (then $pause s)");
	usleep($pause * 1_000_000);
	my ($out, $bad) = $locker->query('DROP EXTENSION sbqueue; COMMIT;');
	is($bad, 0, '... which then drops the extension: no deadlock')
	  or diag($locker->{stderr});
	$locker->quit;
	usleep(200_000);
	$log = slurp_file($node->logfile, $logstart);
	unlike($log, qr/ERROR/, '... and no error in the log');
	$node->safe_psql('db1', 'CREATE EXTENSION IF NOT EXISTS sbqueue');
	workers_are('db1,db3r', '... and a worker maintains db1 again');
}
$node->safe_psql('postgres', q{
	ALTER SYSTEM RESET sbqueue.maintenance_interval;
	ALTER SYSTEM RESET sbqueue.idle_maintenance_interval;
	SELECT pg_reload_conf();});

# --- a crash-restart of the server: launcher and workers come back
$launcher = $node->safe_psql('postgres', $launcher_sql);
my $victim = $node->background_psql('postgres');
my $victim_pid = $victim->query_safe('SELECT pg_backend_pid()');
kill 'KILL', $victim_pid;
eval { $victim->quit };
ok(SbqNode::poll_until($node, 'postgres',
		"SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'sbqueue launcher' AND pid <> $launcher", '1'),
	'the launcher runs again after a crash-restart');
workers_are('db1,db3r', 'the workers run again after a crash-restart');
over_delivered_message('db3r', 'after_crash');
ok($node->poll_query_until('db3r', "SELECT count(*) FROM sbq_peek('after_crash/\$deadletterqueue', 10) WHERE dead_letter_reason = 'MaxDeliveryCountExceeded'", '1'),
	'and they maintain: an over-delivered message is dead-lettered after the crash-restart');

$node->stop;
done_testing();
