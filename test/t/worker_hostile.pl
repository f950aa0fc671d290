# Copyright (c) 2026, the sbqueue authors
#
# The maintenance pool against database owners who are not superusers, and
# the paths by which sbqueue appears in a database that no commit hook sees.
# The workers run as the bootstrap superuser and a few of them serve every
# database, so a database's settings (ALTER DATABASE ... SET, its owner's to
# make) must neither run the owner's code with the workers' rights nor keep a
# worker from the other databases:
#
#	- a search_path with the owner's own operators: a worker's look into the
#	  database runs none of them (the owner does not become superuser);
#	- a role and session authorization to act as, and vacuum cost settings
#	  that would make the worker's vacuum last for hours: ignored;
#	- transaction defaults that would make a worker wait for ever (serializable
#	  read-only deferrable, with a serializable transaction kept open): the
#	  worker neither waits nor takes them, and another database's expired lock
#	  is still dead-lettered at once;
#	- sbqueue created by COMMIT PREPARED, which runs no transaction callback
#	  of ours: the database gets its maintenance within seconds, unused;
#	- a database whose passes fail keeps backing off while workers take turns,
#	  and other roles' failing ALTER EXTENSION statements or new databases do
#	  not cut its back-off short;
#	- ALTER DATABASE ... RENAME left open in a transaction (it keeps the
#	  database locked) holds no worker for longer than a few seconds;
#	- sbq_maintenance_status shows a role the databases it may connect to;
#	- DROP EXTENSION sends the worker there away at once.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use IPC::Run;

my $node = PostgreSQL::Test::Cluster->new('worker_hostile');
$node->init;
$node->append_conf(
	'postgresql.conf', qq(
shared_preload_libraries = 'sbqueue'
max_worker_processes = 8
sbqueue.max_workers = 2
max_prepared_transactions = 5
sbqueue.vacuum_threshold = 1000
log_statement = none
));
$node->start;

my $workers_in = q{SELECT count(*) FROM pg_stat_activity
	WHERE backend_type = 'sbqueue maintenance' AND datname = '%s'};

# A queue with one message delivered once, under a 5 s lock, on its last
# allowed delivery; returns when the lock runs out (epoch seconds).
sub over_delivered_message
{
	my ($db, $queue) = @_;
	return $node->safe_psql($db, qq{
		SELECT sbq_create_queue('$queue', lock_duration => '5 s', max_delivery_count => 1);
		SELECT sbq_send('$queue', 'poison');
		SELECT extract(epoch FROM locked_until) FROM sbq_receive('$queue');
	}) =~ s/.*\n//sr;
}

sub dead_lettered
{
	my ($db, $queue) = @_;
	return $node->poll_query_until($db,
		"SELECT count(*) FROM sbq_peek('$queue/\$deadletterqueue', 10) WHERE dead_letter_reason = 'MaxDeliveryCountExceeded'",
		'1');
}

# --- the roles and databases
$node->safe_psql('postgres', q{
	CREATE ROLE owner2 LOGIN NOSUPERUSER NOCREATEDB;
	CREATE ROLE hostile LOGIN NOSUPERUSER CREATEDB;
	CREATE ROLE watcher LOGIN NOSUPERUSER;
	CREATE DATABASE app;
	CREATE DATABASE own2 OWNER owner2;
	CREATE DATABASE h3 OWNER hostile;
	CREATE DATABASE h4 OWNER hostile;
	CREATE DATABASE hx OWNER hostile;
	CREATE DATABASE p1;
	CREATE DATABASE closed;
	CREATE DATABASE old;
	CREATE DATABASE ren1;
	CREATE DATABASE ren2;
});
$node->safe_psql($_, 'CREATE EXTENSION sbqueue') for qw(ren1 ren2);
$node->safe_psql('app', 'CREATE EXTENSION sbqueue');
$node->safe_psql('hx', 'CREATE EXTENSION sbqueue');
$node->safe_psql('closed', 'CREATE EXTENSION sbqueue');

# own2: operators that make their caller superuser, on the database's
# search_path ahead of pg_catalog, for the comparisons a look could use
$node->connect_ok($node->connstr('own2') . ' user=owner2', 'owner2 connects to own2');
$node->safe_psql('own2', q{
	CREATE SCHEMA evil;
	CREATE FUNCTION evil.escalate() RETURNS boolean LANGUAGE plpgsql AS $$
	BEGIN
		BEGIN
			EXECUTE 'ALTER ROLE owner2 SUPERUSER';
		EXCEPTION WHEN OTHERS THEN NULL;
		END;
		RETURN true;
	END $$;
	CREATE FUNCTION evil.gt(bigint, integer) RETURNS boolean LANGUAGE sql
		AS 'SELECT evil.escalate() AND $1 OPERATOR(pg_catalog.>) $2';
	CREATE OPERATOR evil.> (leftarg = bigint, rightarg = integer, function = evil.gt);
	CREATE FUNCTION evil.eq(name, name) RETURNS boolean LANGUAGE sql
		AS 'SELECT evil.escalate() AND $1 OPERATOR(pg_catalog.=) $2';
	CREATE OPERATOR evil.= (leftarg = name, rightarg = name, function = evil.eq);
	CREATE FUNCTION evil.current_database() RETURNS name LANGUAGE sql
		AS 'SELECT CASE WHEN evil.escalate() THEN pg_catalog.current_database() END';
	ALTER DATABASE own2 SET search_path = evil, pg_catalog;
}, extra_params => [ '-U', 'owner2' ]);

# h3, h4 (no sbqueue) and hx (sbqueue): transactions that wait for a safe
# snapshot and cannot write
for my $db (qw(h3 h4 hx))
{
	$node->safe_psql('postgres', qq{
		ALTER DATABASE $db SET default_transaction_isolation = 'serializable';
		ALTER DATABASE $db SET default_transaction_read_only = on;
		ALTER DATABASE $db SET default_transaction_deferrable = on;
		ALTER DATABASE $db SET statement_timeout = '1ms';
	}, extra_params => [ '-U', 'hostile' ]);
}
# hx: act as its owner, and vacuum at a snail's pace
$node->safe_psql('postgres', q{
	ALTER DATABASE hx SET role = hostile;
	ALTER DATABASE hx SET session_authorization = hostile;
	ALTER DATABASE hx SET vacuum_cost_delay = 100;
	ALTER DATABASE hx SET vacuum_cost_limit = 1;
	ALTER DATABASE hx SET vacuum_cost_page_hit = 10000;
	ALTER DATABASE hx SET vacuum_cost_page_miss = 10000;
	ALTER DATABASE hx SET vacuum_cost_page_dirty = 10000;
}, extra_params => [ '-U', 'hostile' ]);

# closed: only roles granted CONNECT may see it in sbq_maintenance_status
$node->safe_psql('postgres', 'REVOKE CONNECT ON DATABASE closed FROM PUBLIC');

# --- every database is looked at when the server starts; meanwhile a
# serializable read-write transaction stays open, so that a deferrable
# transaction would wait for it
$node->restart;
my $holder = $node->background_psql('postgres');
$holder->query_safe('BEGIN ISOLATION LEVEL SERIALIZABLE READ WRITE');
$holder->query_safe('SELECT txid_current()');

ok($node->poll_query_until('app',
		"SELECT count(*) FROM sbq_maintenance_status WHERE database IN ('app', 'hx', 'closed') AND passes > 0",
		'3'),
	'after the restart the three databases with sbqueue had a pass');
is($node->safe_psql('postgres', "SELECT rolsuper FROM pg_roles WHERE rolname = 'owner2'"), 'f',
	'the look into own2 ran none of its owner\'s operators or functions: owner2 is no superuser');
is($node->safe_psql('app', "SELECT count(*) FROM sbq_maintenance_status WHERE database = 'own2'"), '0',
	'own2 is not taken for a database with sbqueue');

my $t0 = time;
my $until = over_delivered_message('app', 'poison');
ok(dead_lettered('app', 'poison'),
	'with a serializable transaction open and hostile transaction defaults elsewhere, app\'s expired lock is dead-lettered');
my $delay = time - $until;
diag(sprintf('dead-lettered %.2f s after the lock expired', $delay));
cmp_ok($delay, '<', 5, 'within 5 s of the lock\'s expiry (no worker is stuck in h3, h4 or hx)');
is($node->safe_psql('postgres', sprintf($workers_in, 'h3') . " OR datname IN ('h4')"), '0',
	'no worker waits in h3 or h4');
ok($node->poll_query_until('app',
		"SELECT last_pass_result = 'ok' AND passes > 1 FROM sbq_maintenance_status WHERE database = 'hx'"),
	'hx\'s passes succeed: they take neither its transaction defaults nor its statement_timeout');
$holder->query_safe('COMMIT');
$holder->quit;

# hx's worker vacuums its message table as the bootstrap superuser (as the
# role hx sets, VACUUM would skip a table it does not own), and in seconds,
# not at hx's cost settings (hundreds of seconds a page): 1,500 dead rows
# are over sbqueue.vacuum_threshold (1000)
my $bootstrap = $node->safe_psql('postgres', 'SELECT rolname FROM pg_authid WHERE oid = 10');
$node->safe_psql('postgres', "ALTER SYSTEM SET sbqueue.max_workers = 8");
$node->reload;
# hx's statement_timeout of 1 ms holds for these sessions too: lift it at
# connection, not with a SET, which itself runs under it (and a timeout that
# fires as it ends cancels the next statement)
my $hx_untimed = $node->connstr('hx') . " options='-c statement_timeout=0'";
$node->safe_psql('hx', qq{
	SET SESSION AUTHORIZATION $bootstrap;
	SET ROLE NONE;
	SET default_transaction_read_only = off;
	SELECT sbq_create_queue('v');
	SELECT count(*) FROM (SELECT sbq_send('v', 'x') FROM generate_series(1, 1500)) s;
	SELECT count(*) FROM sbq_receive('v', 1500, receive_mode => 'receive_and_delete');
	SELECT pg_stat_force_next_flush();
}, connstr => $hx_untimed);
my $t_vac = time;
my $vacuumed = '';
while (time < $t_vac + 60)
{
	$vacuumed = $node->safe_psql('hx',
		"SELECT vacuum_count > 0 AND n_dead_tup < 1000 FROM pg_stat_all_tables
		 WHERE schemaname = 'sbq' AND relname = 'messages'", connstr => $hx_untimed);
	last if $vacuumed eq 't';
	usleep(200_000);
}
is($vacuumed, 't', 'the worker vacuums hx\'s message table, as the bootstrap superuser');
cmp_ok(time - $t_vac, '<', 10, 'within 10 s: not at hx\'s vacuum cost settings');
$node->safe_psql('postgres', "ALTER SYSTEM RESET sbqueue.max_workers");
$node->reload;

# --- sbqueue created by COMMIT PREPARED: no transaction callback sees its
# commit, the statement's utility hook does
is($node->safe_psql('app', "SELECT count(*) FROM sbq_maintenance_status WHERE database = 'p1'"), '0',
	'p1 has no sbqueue yet');
$node->safe_psql('p1', q{
	BEGIN;
	CREATE EXTENSION sbqueue;
	PREPARE TRANSACTION 'create_sbqueue';
});
# the COMMIT PREPARED statement tells the registry: p1 has its worker within
# seconds, before anything is used there (not a minute later, at the recheck)
$node->safe_psql('p1', "SELECT pg_sleep(1.5)");
my $committed_at = time;
$node->safe_psql('p1', "COMMIT PREPARED 'create_sbqueue'");
my $p1_state = '';
while (time - $committed_at < 10)
{
	$p1_state = $node->safe_psql('app',
		"SELECT state FROM sbq_maintenance_status WHERE database = 'p1' AND passes > 0");
	last if $p1_state eq 'installed';
	usleep(100_000);
}
is($p1_state, 'installed', 'p1 has maintenance passes within 10 s of COMMIT PREPARED, unused');
diag(sprintf('p1: first pass %.2f s after COMMIT PREPARED', time - $committed_at));
$until = over_delivered_message('p1', 'late');
ok(dead_lettered('p1', 'late'), 'in p1 an expired lock is dead-lettered with no receive call');
$delay = time - $until;
diag(sprintf('p1: dead-lettered %.2f s after the lock expired', $delay));
cmp_ok($delay, '<', 10, 'within 10 s of the lock\'s expiry');
is($node->safe_psql('app', "SELECT state FROM sbq_maintenance_status WHERE database = 'p1'"),
	'installed', 'sbq_maintenance_status lists p1');

# --- what a role sees in sbq_maintenance_status
is($node->safe_psql('app',
		"SET ROLE watcher; SELECT string_agg(database, ',' ORDER BY database) FROM sbq_maintenance_status WHERE database IN ('app', 'closed', 'hx')"),
	'app,hx', 'a role sees the databases it may connect to, not closed');
$node->safe_psql('postgres', 'GRANT pg_read_all_stats TO watcher');
is($node->safe_psql('app',
		"SET ROLE watcher; SELECT string_agg(database, ',' ORDER BY database) FROM sbq_maintenance_status WHERE database IN ('app', 'closed', 'hx')"),
	'app,closed,hx', 'with pg_read_all_stats it sees them all');

# --- a database whose ticks fail (an extension version without
# sbq_maintain()) backs off while the workers take turns: 1, 2, 4, 8 s ...
# makes at most 5 ticks in 15 s; without the back-off carried from worker to
# worker it would have one a second
SKIP:
{
	my $sharedir = `pg_config --sharedir`;
	chomp $sharedir;
	skip 'no installed sbqueue 0.1 without sbq_maintain()', 2
	  unless -f "$sharedir/extension/sbqueue--0.1.sql"
	  && slurp_file("$sharedir/extension/sbqueue--0.1.sql") !~ /sbq_maintain/;
	# two more busy databases, so that the two workers take turns
	for my $db (qw(busy1 busy2))
	{
		$node->safe_psql('postgres', "CREATE DATABASE $db");
		$node->safe_psql($db, "CREATE EXTENSION sbqueue; SELECT sbq_create_queue('q')");
	}
	$node->safe_psql('old', "CREATE EXTENSION sbqueue VERSION '0.1'");
	ok($node->poll_query_until('app',
			"SELECT passes > 0 FROM sbq_maintenance_status WHERE database = 'old'"),
		'old had its first tick');
	my $start = $node->safe_psql('app', "SELECT passes FROM sbq_maintenance_status WHERE database = 'old'");
	# meanwhile other roles' statements that would once have cut its
	# back-off short: ALTER EXTENSION sbqueue UPDATE refused for want of
	# rights, each in a transaction of its own, and new databases
	my $flood = IPC::Run::start(
		[ 'psql', '-XAtq', '-d', $node->connstr('app') . ' user=watcher', '-c', q{
			DO $$ BEGIN FOR i IN 1..300 LOOP
				BEGIN ALTER EXTENSION sbqueue UPDATE; EXCEPTION WHEN OTHERS THEN NULL; END;
				COMMIT;
				PERFORM pg_sleep(0.02);
			END LOOP; END $$} ],
		'>', \my $flood_out, '2>', \my $flood_err);
	my $t_end = time + 15;
	my $k = 0;
	while (time < $t_end)
	{
		# keep the others busy: a send makes a database due every interval
		$node->safe_psql($_, "SELECT sbq_send('q', 'x')") for qw(busy1 busy2);
		$node->safe_psql('postgres', "CREATE DATABASE churn$k", extra_params => [ '-U', 'hostile' ]) if $k < 5;
		$k++;
		usleep(200_000);
	}
	$flood->finish;
	my $ticks = $node->safe_psql('app', "SELECT passes FROM sbq_maintenance_status WHERE database = 'old'") - $start;
	diag("old: $ticks failing ticks in 15 s");
	cmp_ok($ticks, '<=', 5, 'a database whose ticks fail backs off across workers (at most 5 ticks in 15 s)');
}

# --- ALTER DATABASE ... RENAME left open in two transactions, one for each
# worker slot: the hold on each database ends after 60 s, and then a worker
# that tries to connect there waits for the database's lock. It gives up
# after a few seconds, so app's expired lock is still dead-lettered.
my @renamers;
for my $db (qw(ren1 ren2))
{
	my $r = $node->background_psql('postgres', timeout => 600);
	$r->query_safe("BEGIN; ALTER DATABASE $db RENAME TO ${db}x");
	push @renamers, $r;
}
usleep(62_000_000);
$until = over_delivered_message('app', 'renamed');
ok(dead_lettered('app', 'renamed'), 'with two renames left open, app\'s expired lock is dead-lettered');
$delay = time - $until;
diag(sprintf('dead-lettered %.2f s after the lock expired, with two renames open', $delay));
cmp_ok($delay, '<', 15, 'within 15 s of the lock\'s expiry (no worker waits for ever at a locked database)');
$_->query_safe('ROLLBACK') for @renamers;
$_->quit for @renamers;

# --- DROP EXTENSION: the worker there goes at once, even with a long idle
# interval ahead of it
$node->safe_psql('postgres', "ALTER SYSTEM SET sbqueue.max_workers = 8");
$node->reload;
ok($node->poll_query_until('postgres', sprintf($workers_in, 'closed'), '1'), 'a worker stays in closed');
$node->safe_psql('closed', 'DROP EXTENSION sbqueue');
my $t_drop = time;
ok($node->poll_query_until('postgres', sprintf($workers_in, 'closed'), '0'), 'after DROP EXTENSION it leaves closed');
cmp_ok(time - $t_drop, '<', 5, 'at once (within 5 s), not at its next tick');
is($node->safe_psql('app', "SELECT count(*) FROM sbq_maintenance_status WHERE database = 'closed'"), '0',
	'closed is no longer listed');

my $log = slurp_file($node->logfile);
unlike($log, qr/(ERROR|PANIC):.*(sbqueue|sbq_)/, 'no error of sbqueue in the log');

$node->stop;
done_testing();
