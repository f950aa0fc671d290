# Copyright (c) 2026, the sbqueue authors
#
# Sessions across a crash (an immediate stop, then a start): what was
# committed survives (the session state set by sbq_set_session_state, the
# messages of sessions, completions) and what was not does not (a state set
# and a completion made in a transaction open at the crash), but session
# locks do not survive: the old session token is SB004 for every session
# call, the message lock tokens taken under it are SB002, and the session is
# accepted again by name at once (lock_duration is 60 s here, so no expiry
# can explain it), its messages received again in sequence order. Maintenance
# and accept-next find such a session at once (one held with 5 minutes left).
#
# The same holds for a crash that the postmaster survives (a backend killed
# with SIGKILL, then crash recovery with restart_after_crash): a session lock
# is stamped with the time the shared memory was made, not with the server's
# start time, which that crash does not change.
#
# It runs twice, on a server with sbqueue preloaded each time: with the SQL of
# the current version, whose session locks live in shared memory (a crash then
# loses the delivery counts of the locks it loses, as it does for any message
# lock in shared memory: the messages come again with the counts they had),
# and with the SQL of 0.7, whose session locks live in the session rows (the
# deliveries lost in the crash are counted, and maintenance ends a lost lock).
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/../harness";
use SbqNode;
use Time::HiRes qw(usleep);

our $node;

sub sql
{
	return $node->safe_psql('postgres', $_[0]);
}

# The messages of the queue as "body:delivery_count", in sequence order.
sub messages
{
	return sql(q{SELECT string_agg(convert_from(body, 'UTF8') || ':' || delivery_count, ' '
	                               ORDER BY sequence_number) FROM sbq_peek('sq', 100)});
}

# Receive up to $n messages of the session under the token named $ses (of
# queue $q, by default sq), keep their tokens by body, and return them as
# "body:delivery_count", in the order received.
sub receive
{
	my ($ses, $n, $q) = @_;
	$q //= 'sq';
	return sql(qq{
		WITH r AS MATERIALIZED (SELECT * FROM sbq_receive_session('$q', tok('$ses'), $n)),
		     k AS (INSERT INTO tok SELECT convert_from(body, 'UTF8'), lock_token FROM r
		           ON CONFLICT (name) DO UPDATE SET tok = excluded.tok)
		SELECT string_agg(convert_from(body, 'UTF8') || ':' || delivery_count, ' ') FROM r});
}

# Accept session $ses (of queue $q, by default sq) by name, keeping its token
# as $name: 'ok' or 'error <SQLSTATE>'.
sub accept_as
{
	my ($name, $ses, $q) = @_;
	$q //= 'sq';
	return sql(qq{SELECT try(\$q\$
		INSERT INTO tok SELECT '$name', session_token FROM sbq_accept_session('$q', '$ses')
		ON CONFLICT (name) DO UPDATE SET tok = excluded.tok\$q\$)});
}


# the scenario on a new server, with the SQL of $version ('' for the current)
sub scenario
{
	my ($version) = @_;
	my $rows = $version ne '';
	# a delivery whose lock the crash lost: counted in rows, not in memory
	my $lost = $rows ? 2 : 1;
	my $lost0 = $rows ? 1 : 0;
	my $create = $rows ? "CREATE EXTENSION sbqueue VERSION '$version'" : 'CREATE EXTENSION sbqueue';
	my $mode = $rows ? "$version, locks in rows" : 'locks in memory';

	note("session locks: $mode");
	local $node = SbqNode::preloaded($rows ? 'sessions_rows' : 'sessions_memory', qq(
restart_after_crash = on
));
	$node->safe_psql('postgres', $create);
	$node->safe_psql('postgres', q{
	-- 'ok', or 'error' and the SQLSTATE
	CREATE FUNCTION try(sql text) RETURNS text LANGUAGE plpgsql AS $f$
	BEGIN
		EXECUTE sql;
		RETURN 'ok';
	EXCEPTION WHEN OTHERS THEN
		RETURN 'error ' || SQLSTATE;
	END $f$;
	-- the tokens the test keeps across the crash
	CREATE TABLE tok (name text PRIMARY KEY, tok uuid);
	CREATE FUNCTION tok(text) RETURNS uuid LANGUAGE sql
		AS $f$ SELECT tok FROM tok WHERE name = $1 $f$;
	SELECT sbq_create_queue('sq', requires_session => true, lock_duration => '60 s');
	SELECT sbq_send('sq', 'a1', session_id => 'A');
	SELECT sbq_send('sq', 'b1', session_id => 'B');
	SELECT sbq_send('sq', 'a2', session_id => 'A');
	SELECT sbq_send('sq', 'a3', session_id => 'A');
	SELECT sbq_send('sq', 'a4', session_id => 'A');
	SELECT sbq_send('sq', 'b2', session_id => 'B');
	SELECT sbq_create_queue('sh', requires_session => true, lock_duration => '5 s');
	SELECT sbq_send('sh', 'h1', session_id => 'H');
	SELECT sbq_send('sh', 'h2', session_id => 'H');
	SELECT sbq_create_queue('sl', requires_session => true, lock_duration => '5 minutes');
	SELECT sbq_send('sl', 'l1', session_id => 'L');
});

### before the crash: A and B held, state set, a1 completed, a2 and a3 locked
is(accept_as('A_old', 'A'), 'ok', 'A accepted');
is(accept_as('B_old', 'B'), 'ok', 'B accepted');
is(receive('A_old', 3), 'a1:1 a2:1 a3:1', 'A: the first three in order');
is(receive('B_old', 1), 'b1:1', 'B: its first');
is(accept_as('H_old', 'H', 'sh'), 'ok', 'H accepted (lock_duration 5 s)');
is(receive('H_old', 1, 'sh'), 'h1:1', 'H: its first');
is(accept_as('L_old', 'L', 'sl'), 'ok', 'L accepted (lock_duration 5 minutes)');
is(sql(q{SELECT try($$SELECT sbq_complete('sq', tok('a1'))$$)}), 'ok', 'a1 completed');
sql(q{SELECT sbq_set_session_state('sq', tok('A_old'), 'committed state'::bytea)});

# a transaction open at the crash: a state and a completion that never commit
my $open = $node->background_psql('postgres', on_error_stop => 0);
$open->query_safe(q{BEGIN});
$open->query_safe(q{SELECT sbq_set_session_state('sq', tok('A_old'), 'lost state'::bytea)});
$open->query_safe(q{SELECT sbq_complete('sq', tok('a2'))});
is(messages(), 'b1:1 a2:1 a3:1 a4:0 b2:0', 'before the crash');

### the crash
$node->stop('immediate');
eval { $open->quit };
$node->start;

### after it: what was committed survives
is(messages(), "b1:$lost0 a2:$lost0 a3:$lost0 a4:0 b2:0",
	"every message of the sessions survives; a1 stays completed, a2 (completed uncommitted) stays ($mode)");
is(sql(q{SELECT string_agg(session_id || ' ' || has_state || ' ' || (locked_until IS NULL), ', '
                           ORDER BY session_id) FROM sbq_list_sessions('sq')}),
	'A true true, B false true', 'both sessions are listed, neither as held, A with its state');

### ... the session locks do not
is(sql(q{SELECT try($$SELECT sbq_receive_session('sq', tok('A_old'), 10)$$)}), 'error SB004',
	'the old session token is lost for receive');
is(sql(q{SELECT try($$SELECT sbq_renew_session('sq', tok('A_old'))$$)}), 'error SB004',
	'... for renew');
is(sql(q{SELECT try($$SELECT sbq_get_session_state('sq', tok('A_old'))$$)}), 'error SB004',
	'... for reading the state');
is(sql(q{SELECT try($$SELECT sbq_set_session_state('sq', tok('A_old'), 'x'::bytea)$$)}),
	'error SB004', '... for setting it');
is(sql(q{SELECT try($$SELECT sbq_release_session('sq', tok('A_old'))$$)}), 'error SB004',
	'... and for release');
is(sql(q{SELECT try($$SELECT sbq_complete('sq', tok('a2'))$$)}), 'error SB002',
	'a message lock token taken under it is lost for complete');
is(sql(q{SELECT try($$SELECT sbq_complete('sq', ARRAY[tok('a3')])$$)}), 'error SB002',
	'... also in an array');
is(sql(q{SELECT try($$SELECT sbq_abandon('sq', tok('a3'))$$)}), 'error SB002',
	'... and for abandon');
is(sql(q{SELECT try($$SELECT sbq_complete('sq', tok('a1'))$$)}), 'error SB002',
	'the token of the completed a1 stays settled');
is(messages(), "b1:$lost0 a2:$lost0 a3:$lost0 a4:0 b2:0", 'the refused calls changed nothing');

### A is accepted again by name at once, with its state, and its messages in order
is(accept_as('A_new', 'A'), 'ok',
	'A is accepted again by name at once after the crash (its old lock had 60 s to run)');
is(accept_as('A_other', 'A'), 'error SB005', '... and is held then: another accept is SB005');
is(sql(q{SELECT convert_from(sbq_get_session_state('sq', tok('A_new')), 'UTF8')}), 'committed state',
	'the committed state survived, the uncommitted one did not');
is(receive('A_new', 10), "a2:$lost a3:$lost a4:1",
	"its messages come again in sequence order ($mode)");
is(sql(q{SELECT try($$SELECT sbq_complete('sq', ARRAY[tok('a2'), tok('a3'), tok('a4')])$$)}), 'ok',
	'the new message tokens complete');
is(sql(q{SELECT try($$SELECT sbq_complete('sq', tok('b1'))$$)}), 'error SB002',
	'the token of B\'s message from before the crash is lost too');
is(messages(), "b1:$lost0 b2:0", 'what is left: B\'s messages');

### B: accepted by name at once too
is(accept_as('B_new', 'B'), 'ok', 'B is accepted by name at once');
is(receive('B_new', 10), "b1:$lost b2:1", 'B\'s messages come again in order');
is(sql(q{SELECT sbq_complete('sq', ARRAY[tok('b1'), tok('b2')])}), '2', 'and complete');
is(messages(), '', 'nothing is left');

### L: accept-next finds it at once, its lost lock had minutes to run
is(sql(q{SELECT session_id FROM sbq_accept_session('sl')}), 'L',
	'accept-next returns L at once after the crash (its old lock had 5 minutes to run)');

### H: maintenance ends its lost lock once that lock's time has passed (or
### sooner), and then accept-next finds it at once
ok($node->poll_query_until('postgres', q{SELECT sbq_maintain() ->> 'sessions_expired'}, '1'),
	'maintenance ends the lock of H that the crash lost') if $rows;
is(sql(q{
	WITH s AS (SELECT * FROM sbq_accept_session('sh'))
	INSERT INTO tok SELECT 'H_new', session_token FROM s
	ON CONFLICT (name) DO UPDATE SET tok = excluded.tok RETURNING (SELECT session_id FROM s)}),
	'H', 'accept-next returns H then');
is(sql(q{SELECT try($$SELECT sbq_complete('sh', tok('h1'))$$)}), 'error SB002',
	'the token of h1 from before the crash is lost');
is(receive('H_new', 10, 'sh'), "h1:$lost h2:1", 'H\'s messages come again in order');
is(sql(q{SELECT sbq_complete('sh', ARRAY[tok('h1'), tok('h2')])}), '2', 'and complete');

### a crash the postmaster survives: a backend killed with SIGKILL, and crash
### recovery. The session locks should be lost as in the restart above.
is(receive('A_new', 10), '', 'A is still held by its new token, nothing left in it');
is(sql(q{SELECT sbq_send('sq', 'a5', session_id => 'A') > 0}), 't', 'a5 sent to A');
is(receive('A_new', 10), 'a5:1', 'a5 received under the new lock');
my $start_before = sql('SELECT pg_postmaster_start_time()');
my $sleeper = IPC::Run::start(['psql', '-X', '-d', $node->connstr('postgres'), '-c',
		'SELECT pg_sleep(60) AS sleeper'], '>', \my $sout, '2>', \my $serr);
my $pid = '';
for (1 .. 100)
{
	$pid = sql(q{SELECT pid FROM pg_stat_activity WHERE query LIKE 'SELECT pg_sleep(60) AS sleeper%'});
	last if $pid ne '';
	usleep(100_000);
}
like($pid, qr/^\d+$/, 'a backend to kill');
my $off = -s $node->logfile;
kill 'KILL', $pid;
$sleeper->finish;
ok(SbqNode::wait_crash_restart($node, $off)
	  && SbqNode::poll_until($node, 'postgres', q{SELECT count(*) FROM sbq_peek('sq', 10)}, '1'),
	'the server is back after the SIGKILL');
like(slurp_file($node->logfile), qr/all server processes terminated; reinitializing/,
	'it went through crash recovery');
is(sql('SELECT pg_postmaster_start_time()'), $start_before,
	'(the postmaster, and its start time, survived)');
is(messages(), "a5:$lost0", 'a5 survives');
is(sql(q{SELECT try($$SELECT sbq_renew_session('sq', tok('A_new'))$$)}), 'error SB004',
	'the session token from before the backend crash is lost');
is(sql(q{SELECT try($$SELECT sbq_complete('sq', tok('a5'))$$)}), 'error SB002',
	'... and the message token under it');
is(sql(q{SELECT session_id FROM sbq_accept_session('sq', 'A')}), 'A',
	'... and A is accepted again by name at once');

$node->stop;
}

scenario('');
scenario('0.7');
done_testing();
