# Copyright (c) 2026, the sbqueue authors
#
# What a node logs of a routed call (docs/scale-out.md, decision 3), on one
# server: a routed call reaches a node as the statement
# "SELECT r FROM <schema>.sbq_routed(key, fn, args) r(r)" with its arguments
# as constants, and the node logs its errors without it, and a deadlock's
# detail shows it as a routed call, every line of it. No other statement
# hides itself so: not one that merely starts like a routed call, not one of
# that exact form that calls another function named sbq_routed, even after
# sbqueue's own ran in the same transaction, and not the other processes of
# a deadlock.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use IPC::Run;
use FindBin;
use lib "$FindBin::RealBin/../harness";
use SbqNode;

my $node = SbqNode::preloaded('citus_log', qq(
log_min_error_statement = error
log_statement = none
restart_after_crash = on
));
$node->safe_psql('postgres', q{
	CREATE EXTENSION sbqueue;
	CREATE SCHEMA evil;
	CREATE FUNCTION evil.sbq_routed(integer, text, text[]) RETURNS SETOF text[]
	LANGUAGE plpgsql AS $$
	BEGIN
		IF $2 = 'lock' THEN
			PERFORM pg_advisory_xact_lock(2);
			RETURN;
		END IF;
		IF $2 = 'sleep' THEN
			PERFORM pg_sleep(300);
			RETURN;
		END IF;
		RAISE EXCEPTION 'evil fails';
	END $$;
});

# a function named sbq_routed, in pg_temp, that calls sbqueue's inside and then fails
my $borrowed = q{
	CREATE FUNCTION pg_temp.sbq_routed(integer, text, text[]) RETURNS SETOF text[]
	LANGUAGE plpgsql AS $$
	BEGIN
		BEGIN
			PERFORM public.sbq_routed(1, 'public.no_such_function(text)', '{}');
		EXCEPTION WHEN others THEN
		END;
		RAISE EXCEPTION 'borrowed fails';
	END $$;
};

# the log from offset on
sub log_from
{
	my ($offset) = @_;
	return substr(slurp_file($node->logfile), $offset);
}

# 1. sbqueue's sbq_routed, called in the form Citus sends, fails (this server holds no
# shard group): the error is logged, the statement with its arguments is not
my $off = -s $node->logfile;
my ($ret, $out, $err) = $node->psql('postgres',
	q{SELECT r FROM public.sbq_routed(1, 'public.no_such_function(text)'::text, '{MARK1}'::text[]) r(r)});
like($err, qr/no_such_function/, 'a routed call that fails reports its error');
my $log = log_from($off);
like($log, qr/ERROR:.*no_such_function/, '... which its node logs');
unlike($log, qr/MARK1/, '... without the statement that holds its arguments');

# 2. a statement that starts as a routed call does and names sbq_routed(, but is no
# routed call, is logged with its statement
$off = -s $node->logfile;
$node->psql('postgres', q{SELECT r FROM (SELECT 1 / 0 AS r) x WHERE 'sbq_routed(' <> 'MARK2'});
like(log_from($off), qr/STATEMENT:.*MARK2/,
	'a statement that only looks like a routed call is logged with its statement');

# 3. a statement of that exact form calling another function named sbq_routed, in
# the transaction where sbqueue's sbq_routed just failed, is logged with its statement
$off = -s $node->logfile;
$node->psql('postgres', q{
	BEGIN;
	SAVEPOINT s;
	SELECT r FROM public.sbq_routed(1, 'public.no_such_function(text)'::text, '{MARK3a}'::text[]) r(r);
	ROLLBACK TO s;
	SELECT r FROM evil.sbq_routed(1, 'MARK3b'::text, '{}'::text[]) r(r);
	ROLLBACK;
}, on_error_stop => 0);
$log = log_from($off);
like($log, qr/STATEMENT:.*MARK3b/,
	'a statement of the form in the transaction after a routed call is logged with its statement');
unlike($log, qr/MARK3a/, '... while the routed call before it is not');

# 3b. nor is a statement that calls another function named sbq_routed which calls
# sbqueue's inside (as a statement that runs sbq_routed somewhere would)
$off = -s $node->logfile;
$node->psql('postgres', $borrowed
	  . q{SELECT r FROM pg_temp.sbq_routed(1, 'MARK3c'::text, '{}'::text[]) r(r);},
	on_error_stop => 0);
like(log_from($off), qr/STATEMENT:.*MARK3c/,
	'a statement that runs sbq_routed inside another function is logged with its statement');

# 3c. a routed call's text that means something else later (a domain named text first
# on search_path: no constant, and code that runs) is logged with its statement then
$off = -s $node->logfile;
$node->psql('postgres', q{
	SELECT r FROM public.sbq_routed(1, 'public.no_such_function(text)'::text, '{MARK7}'::text[]) r(r);
	CREATE DOMAIN evil.text AS pg_catalog.text CHECK (VALUE <> 'public.no_such_function(text)');
	SET search_path = evil, pg_catalog, public;
	SELECT r FROM public.sbq_routed(1, 'public.no_such_function(text)'::text, '{MARK7}'::text[]) r(r);
	RESET search_path;
	DROP DOMAIN evil.text;
}, on_error_stop => 0);
$log = log_from($off);
like($log, qr/ERROR:.*no_such_function/, 'a routed call is logged');
like($log, qr/violates check constraint.*\n.*STATEMENT:.*MARK7/,
	'... and the same text, no routed call once search_path changed, with its statement');

# 4. a deadlock between a statement of the routed form (its second line, past
# track_activity_query_size, holds a secret) and another one: the detail for the
# log shows the first as a routed call, no line of it, and the second whole
my $secret = 'SECRET' . int(rand(1e9));
my $body = "line one\n$secret " . ('x' x 2000);
my $t = $node->background_psql('postgres', on_error_stop => 0);
$t->query_safe(q{SET deadlock_timeout = '60s'});
$t->query_safe('BEGIN');
$t->query_safe('SELECT pg_advisory_xact_lock(1)');
my $u = $node->background_psql('postgres', on_error_stop => 0);
$u->query_safe('BEGIN');
$u->query_safe('SELECT pg_advisory_xact_lock(2)');
$off = -s $node->logfile;
$t->query_until(qr/started/, "\\echo started\nSELECT r FROM evil.sbq_routed(1, 'lock'::text, '{$body}'::text[]) r(r);\n");
$node->poll_query_until('postgres',
	q{SELECT count(*) = 1 FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%evil.sbq_routed%'});
$u->query(q{SET deadlock_timeout = '100ms'});
$u->query(q{SELECT pg_advisory_xact_lock(1) /* MARK4 */});
$log = log_from($off);
like($log, qr/ERROR:  deadlock detected/, 'the deadlock is logged');
like($log, qr/Process \d+: \(a routed sbqueue call\)/, '... its routed call shown as such');
like($log, qr/Process \d+: SELECT pg_advisory_xact_lock\(1\) \/\* MARK4 \*\//,
	'... the other statement shown whole');
unlike($log, qr/\Q$secret\E|line one|xxxxx/, '... and no line of the routed call');
$u->quit;
$t->quit;

# 5. a process of the routed form that crashes: the postmaster's report of it shows
# what it was running as a routed call, no line of it
$secret = 'SECRET' . int(rand(1e9));
$t = $node->background_psql('postgres', on_error_stop => 0);
$t->query_until(qr/started/,
	"\\echo started\nSELECT r FROM evil.sbq_routed(1, 'sleep'::text, '{\"x\n$secret\"}'::text[]) r(r);\n");
$node->poll_query_until('postgres',
	q{SELECT count(*) = 1 FROM pg_stat_activity WHERE wait_event = 'PgSleep' AND query LIKE '%evil.sbq_routed%'});
my $pid = $node->safe_psql('postgres',
	q{SELECT pid FROM pg_stat_activity WHERE wait_event = 'PgSleep' AND query LIKE '%evil.sbq_routed%'});
$off = -s $node->logfile;
kill 'KILL', $pid;
SbqNode::wait_crash_restart($node, $off) or die 'the server did not come back after the kill';
eval { $t->quit; };
$log = log_from($off);
like($log, qr/terminated by signal 9/, 'the postmaster reports the process killed');
like($log, qr/DETAIL:  Failed process was running: \(a routed sbqueue call\)/,
	'... running a routed call');
unlike($log, qr/\Q$secret\E/, '... and no line of it');

$node->stop;

# 6. without the preload, the statement that loads sbqueue to run the call: the hook
# that sees statements analysed came too late for it, and sbq_routed notes it
my $plain = PostgreSQL::Test::Cluster->new('citus_log_plain');
$plain->init;
$plain->append_conf('postgresql.conf', "log_statement = none\n");
$plain->start;
$plain->safe_psql('postgres', 'CREATE EXTENSION sbqueue');
$off = -s $plain->logfile;
$plain->psql('postgres',
	q{SELECT r FROM public.sbq_routed(1, 'public.no_such_function(text)'::text, '{MARK6}'::text[]) r(r)});
$log = substr(slurp_file($plain->logfile), $off);
like($log, qr/ERROR:.*no_such_function/, 'without the preload, a routed call that fails is logged');
unlike($log, qr/MARK6/, '... without its statement, in the backend it loaded sbqueue in');

# ... also over the extended protocol (sbqueue loads at Bind, the call runs at Execute)
my $script = $plain->basedir . '/routed.sql';
PostgreSQL::Test::Utils::append_to_file($script,
	"SELECT r FROM public.sbq_routed(1, 'public.no_such_function(text)'::text, '{MARK9}'::text[]) r(r);\n");
$off = -s $plain->logfile;
IPC::Run::run([ 'pgbench', '-n', '-t', '1', '-M', 'extended', '-f', $script,
	'-h', $plain->host, '-p', $plain->port, 'postgres' ], '>', \my $pgb_out, '2>', \my $pgb_err);
$log = substr(slurp_file($plain->logfile), $off);
like($log, qr/ERROR:.*no_such_function/, '... over the extended protocol it is logged');
unlike($log, qr/MARK9/, '... without its statement');

# but not a statement that calls another function named sbq_routed, which loads sbqueue
$off = -s $plain->logfile;
$plain->psql('postgres', $borrowed
	  . q{SELECT r FROM pg_temp.sbq_routed(1, 'MARK8'::text, '{}'::text[]) r(r);},
	on_error_stop => 0);
like(substr(slurp_file($plain->logfile), $off), qr/STATEMENT:.*MARK8/,
	'... and a statement that loads sbqueue calling sbq_routed inside is logged with its statement');
$plain->stop;
done_testing();
