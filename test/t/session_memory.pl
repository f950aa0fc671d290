# Copyright (c) 2026, the sbqueue authors
#
# Session locks kept in shared memory (sbqueue preloaded, src/session_mem.c):
#	- accepting a session (the next one, or one by name that has a row),
#	  receiving its messages and releasing it assign no transaction id, so
#	  they write no WAL;
#	- a release waits for a receive of the same session in flight, whose
#	  locks it then ends (so no message lock outlives its session lock), and
#	  a named accept waits for another transaction taking the same session:
#	  SB005 when that one commits, the session when it rolls back;
#	- the slots of session locks come back: at a rollback, when a queue is
#	  deleted, when a database is dropped, and when maintenance ends expired
#	  ones; DROP and CREATE EXTENSION start afresh (a session key of the new
#	  extension never meets a lock of the old one);
#	- when this database's share of the table is full, accepting fails with
#	  53200 and changes nothing.
# The table is small (sbqueue.max_locks = 1024, all of it for one database),
# so that leaked slots show: two sets of 700 session locks do not fit.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/../harness";
use SbqNode;
use Time::HiRes qw(time usleep);

my $max_locks = 1024;
my $fill = 700;

my $node = SbqNode::preloaded('session_memory', qq(
sbqueue.max_locks = $max_locks
sbqueue.max_locks_per_database = $max_locks
sbqueue.enable_maintenance_worker = off
));

sub sql { my ($db, $q) = @_; return $node->safe_psql($db, $q); }

# 'ok', or 'error <SQLSTATE>'
my $try_fn = q{
	CREATE FUNCTION try(sql text) RETURNS text LANGUAGE plpgsql AS $f$
	BEGIN
		EXECUTE sql;
		RETURN 'ok';
	EXCEPTION WHEN OTHERS THEN
		RETURN 'error ' || SQLSTATE;
	END $f$;
	CREATE TABLE tok (name text PRIMARY KEY, tok uuid);
	CREATE FUNCTION tok(text) RETURNS uuid LANGUAGE sql
		AS $f$ SELECT tok FROM tok WHERE name = $1 $f$;
};

sub new_db
{
	my ($db) = @_;
	sql('postgres', "CREATE DATABASE $db");
	sql($db, 'CREATE EXTENSION sbqueue');
	sql($db, $try_fn);
}

# Accept $n sessions of queue $q by name ($p1 .. $pn, $p by default 's') in
# one transaction (committed unless $rollback): how many, or the error's
# SQLSTATE.
sub hold
{
	my ($db, $q, $n, $rollback, $p) = @_;
	$p //= 's';
	my $end = $rollback ? 'ROLLBACK' : 'COMMIT';
	my ($ret, $out, $err) = $node->psql($db, qq{
		BEGIN;
		SELECT count(*) FROM generate_series(1, $n) i,
		       LATERAL sbq_accept_session('$q', '$p' || i) a;
		$end;
	}, extra_params => [ '-v', 'VERBOSITY=verbose' ]);
	return $ret == 0 ? $out : ($err =~ /ERROR:\s+(\w{5})/ ? "error $1" : "error: $err");
}

new_db('wal');
sql('wal', q{
	SELECT sbq_create_queue('q', requires_session => true);
	SELECT sbq_send('q', 'a1', session_id => 'A');
	SELECT sbq_send('q', 'a2', session_id => 'A');
	SELECT sbq_send('q', 'b1', session_id => 'B');
	-- B's row exists (a send made it): accepting it by name writes nothing
});

### no transaction id: accept-next, receive, release; accept by name; renew
my $no_xid = sql('wal', q{
	BEGIN;
	SELECT session_id FROM sbq_accept_session('q');
	SELECT count(*) FROM sbq_receive_session('q',
	       (SELECT session_token FROM sbq_accept_session('q', 'B')), 10);
	SELECT txid_current_if_assigned() IS NULL AS no_xid;
	COMMIT;
});
is($no_xid, "A\n1\nt",
	'accept-next, a named accept of a session with a row, and a receive under it assign no transaction id');
is(sql('wal', q{SELECT try($$SELECT sbq_accept_session('q', 'A')$$)}), 'error SB005',
	'A is held by the committed accept-next above');
my $cycle = sql('wal', q{
	SELECT sbq_send('q', 'c1', session_id => 'C');
	BEGIN;
	INSERT INTO tok SELECT 'C', session_token FROM sbq_accept_session('q', 'C');
	COMMIT;
	BEGIN;
	SELECT count(*) FROM sbq_receive_session('q', tok('C'), 10);
	SELECT sbq_renew_session('q', tok('C')) > now();
	SELECT sbq_release_session('q', tok('C'));
	SELECT txid_current_if_assigned() IS NULL AS no_xid;
	COMMIT;
});
like($cycle, qr/\n1\nt\n\nt$/,
	'receive, renew and release (of a session with messages left) assign no transaction id');

### a release waits for a receive of the session in flight, then ends its locks
sql('wal', q{
	SELECT sbq_send('q', 'd1', session_id => 'D');
	SELECT sbq_send('q', 'd2', session_id => 'D');
	INSERT INTO tok SELECT 'D', session_token FROM sbq_accept_session('q', 'D');
});
my $recv = $node->background_psql('wal', on_error_stop => 0);
$recv->query_safe('BEGIN');
is($recv->query_safe(q{
	SELECT string_agg(convert_from(body, 'UTF8'), ' ') FROM (
	  SELECT body FROM sbq_receive_session('q', tok('D'), 1)) r}), 'd1', 'a receive in flight has d1');
my $rel = $node->background_psql('wal', on_error_stop => 0);
$rel->query_until(qr/started/, q{
	\echo started
	SELECT sbq_release_session('q', tok('D'));
});
ok($node->poll_query_until('wal', q{
	SELECT count(*) > 0 FROM pg_stat_activity
	 WHERE wait_event_type = 'Lock' AND query LIKE '%sbq_release_session%'}),
	'the release waits for the receive in flight');
$recv->query_safe('COMMIT');
$rel->quit;
is(sql('wal', q{SELECT convert_from(body, 'UTF8') || ' ' || (locked_until IS NULL) || ' ' || delivery_count
                  FROM sbq_peek('q', 100) WHERE session_id = 'D' ORDER BY sequence_number LIMIT 1}),
	'd1 true 0', 'after it d1 is not locked, its delivery not counted (a release)');
is(sql('wal', q{SELECT a.session_id || ' ' || convert_from(m.body, 'UTF8') || ' ' || m.delivery_count
                  FROM sbq_accept_session('q', 'D') a, LATERAL sbq_receive_session('q', a.session_token, 1) m}),
	'D d1 1', 'D is accepted again, d1 comes first with its delivery counted once');
$recv->quit;

### a named accept waits for another transaction taking the same session
sub accept_race
{
	my ($end) = @_;
	my $s = "E$end";
	sql('wal', "SELECT sbq_send('q', 'e', session_id => '$s')");
	my $first = $node->background_psql('wal', on_error_stop => 0);
	$first->query_safe('BEGIN');
	$first->query_safe("SELECT count(*) FROM sbq_accept_session('q', '$s')");
	my $second = $node->background_psql('wal', on_error_stop => 0);
	$second->query_until(qr/started/, qq{
		\\echo started
		SELECT try(\$\$SELECT sbq_accept_session('q', '$s')\$\$) AS second;
	});
	ok($node->poll_query_until('wal', q{
		SELECT count(*) > 0 FROM pg_stat_activity
		 WHERE wait_event_type = 'Lock' AND query LIKE '%AS second%'}),
		"a second accept of $s waits for the first one's transaction");
	$first->query_safe($end);
	my $got = $second->query_safe('SELECT 1');
	$second->quit;
	$first->quit;
	return $got;
}
# the second's result comes before the next query's output
like(accept_race('COMMIT'), qr/error SB005/, 'the first commits: the second gets SB005');
like(accept_race('ROLLBACK'), qr/^ok$/m, 'the first rolls back: the second gets the session');

### slots come back
new_db('slots');
sql('slots', "SELECT sbq_create_queue('q', requires_session => true, lock_duration => '5 s')");
is(hold('slots', 'q', $fill, 1), $fill, "$fill session locks taken in a transaction that rolls back");
is(hold('slots', 'q', $fill), $fill, '... and their slots are back: another 700 fit');
is(hold('slots', 'q', $fill, 0, 't'), 'error 53200',
	'a third 700 do not (the table holds 1024): 53200, out of shared memory');
is(sql('slots', q{SELECT locked_session_count || ' ' || session_count FROM sbq_queue_stats}),
	"$fill $fill", '... and that changed nothing: the 700 held ones, no new session rows');
usleep(5_200_000);
is(sql('slots', q{SELECT (sbq_maintain() ->> 'sessions_expired')::int}), $fill,
	'maintenance ends the 700 expired session locks');
is(hold('slots', 'q', $fill, 0, 'u'), $fill, '... and their slots are back (700 other sessions fit)');
sql('slots', q{SELECT sbq_delete_queue('q')});
sql('slots', "SELECT sbq_create_queue('q2', requires_session => true)");
is(hold('slots', 'q2', $fill), $fill, 'a deleted queue gives its session locks\' slots back');

new_db('dropped');
sql('dropped', "SELECT sbq_create_queue('q', requires_session => true)");
sql('slots', q{SELECT sbq_delete_queue('q2')});
is(hold('dropped', 'q', $fill), $fill, "$fill held in a database about to be dropped");
sql('postgres', 'DROP DATABASE dropped WITH (FORCE)');
sql('slots', "SELECT sbq_create_queue('q3', requires_session => true)");
is(hold('slots', 'q3', $fill), $fill, 'a dropped database gives its session locks\' slots back');
sql('slots', q{SELECT sbq_delete_queue('q3')});

### what a review found
new_db('review');
sql('review', q{SELECT sbq_create_queue('replies', requires_session => true, lock_duration => '5 s')});
# reply sessions accepted by name before any reply came, never released
is(hold('review', 'replies', 10, 0, 'reply'), 10, '10 reply sessions accepted by name, none with messages');
my $reply_key = sql('review', q{SELECT min(session_key) FROM sbq.sessions});
# a queue deleted while another transaction's accept of one of its sessions is open:
# the delete waits for that transaction (as for a send's), then goes through
sql('review', q{
	SELECT sbq_create_queue('doomed', requires_session => true, lock_duration => '5 s');
	SELECT sbq_send('doomed', 'x', session_id => 'D');
});
my $doomed_key = sql('review', q{SELECT session_key FROM sbq.sessions WHERE session_id = 'D'});
my $open = $node->background_psql('review', on_error_stop => 0);
$open->query_safe('BEGIN');
is($open->query_safe(q{SELECT session_id FROM sbq_accept_session('doomed')}), 'D',
	'an accept of D, in a transaction left open');
my $deleter = $node->background_psql('review', on_error_stop => 0);
$deleter->{stdin} .= "SELECT sbq_delete_queue('doomed');\n";
$deleter->{run}->pump_nb;
ok(SbqNode::poll_until($node, 'review', q{SELECT count(*) FROM pg_stat_activity
	WHERE query LIKE '%sbq_delete_queue(''doomed'')%' AND wait_event_type = 'Lock'}, '1'),
	'... and a delete of its queue waits for that transaction');
$open->query_safe('COMMIT');
$open->quit;
$deleter->query_safe('SELECT 1');
$deleter->quit;
is(sql('review', q{SELECT count(*) FROM sbq_queues WHERE queue = 'doomed'}), '0',
	'... and goes through once it commits');
ok(sql('review', "SELECT sbq.session_until($doomed_key) IS NOT NULL"),
	'D\'s lock, committed before its queue was deleted, holds a slot');
usleep(5_200_000);
is(sql('review', q{SELECT (sbq_maintain() ->> 'sessions_expired')::int}), '10',
	'maintenance ends the expired locks of the reply sessions (a queue without messages)');
is(sql('review', "SELECT sbq.session_until($reply_key) IS NULL AND sbq.session_until($doomed_key) IS NULL"),
	't', '... and their slots are free, and so is D\'s (its queue deleted: freed, no delivery to count)');
is(sql('review', q{SELECT session_count FROM sbq_queue_stats WHERE queue = 'replies'}), '0',
	'... and the reply sessions, empty and without state, are gone');

# accept-next when every session in line is held writes nothing
sql('review', q{
	SELECT sbq_create_queue('busy', requires_session => true);
	SELECT count(sbq_send('busy', 'm', session_id => 'b' || i)) FROM generate_series(1, 12) i;
});
is(hold('review', 'busy', 12, 0, 'b'), 12, '12 sessions with messages, all held');
is(sql('review', q{
	BEGIN;
	SELECT count(*) FROM sbq_accept_session('busy');
	SELECT txid_current_if_assigned() IS NULL;
	COMMIT;}), "0\nt", 'accept-next passes over the 12 held sessions, finds none, and takes no transaction id');

# a purge keeps the lock of a held session
sql('review', q{
	SELECT sbq_create_queue('purged', requires_session => true);
	SELECT sbq_send('purged', 'p', session_id => 'P');
	INSERT INTO tok SELECT 'P', session_token FROM sbq_accept_session('purged', 'P');
	SELECT count(*) FROM sbq_receive_session('purged', tok('P'));
	SELECT sbq_purge_queue('purged');
});
is(sql('review', q{SELECT try($$SELECT sbq_set_session_state('purged', tok('P'), 'x'::bytea)$$)}), 'ok',
	'after a purge the holder of P still holds it (it sets its state)');
is(sql('review', q{SELECT try($$SELECT sbq_accept_session('purged', 'P')$$)}), 'error SB005',
	'... and nobody else can accept P');

# a renew does not wait for a settlement of the holder's own open transaction
sql('review', q{
	SELECT sbq_create_queue('renewed', requires_session => true);
	SELECT sbq_send('renewed', 'r1', session_id => 'R');
	SELECT sbq_send('renewed', 'r2', session_id => 'R');
	INSERT INTO tok SELECT 'R', session_token FROM sbq_accept_session('renewed', 'R');
	INSERT INTO tok SELECT 'r' || sequence_number, lock_token
	  FROM sbq_receive_session('renewed', tok('R'), 1);
});
my $holder = $node->background_psql('review', on_error_stop => 0);
$holder->query_safe('BEGIN');
$holder->query_safe(q{SELECT sbq_complete('renewed', (SELECT tok FROM tok WHERE name LIKE 'r%' AND name <> 'R'))});
is(sql('review', q{SET statement_timeout = '3s';
                   SELECT try($$SELECT sbq_renew_session('renewed', tok('R'))$$)}), 'ok',
	'a renew of R while the holder\'s open transaction completes one of its messages: no wait');
is($holder->query_safe(q{SELECT convert_from(body, 'UTF8') FROM sbq_receive_session('renewed', tok('R'), 5)}),
	'r2', '... and that transaction receives on');
$holder->query_safe('COMMIT');
$holder->quit;

# ... and when that settlement rolls back, the message's lock comes back with the
# session's renewed expiry: it does not run out under the session lock. 10 s
# locks: the renew must come before the first expiry, after two psql starts
# and 3 s, on however loaded a machine
sql('review', q{
	SELECT sbq_create_queue('rolled', requires_session => true, lock_duration => '10 s',
	                        max_delivery_count => 1);
	SELECT sbq_send('rolled', 'o1', session_id => 'O');
	SELECT sbq_send('rolled', 'o2', session_id => 'O');
	INSERT INTO tok SELECT 'O', session_token FROM sbq_accept_session('rolled', 'O');
	INSERT INTO tok SELECT 'o1', lock_token FROM sbq_receive_session('rolled', tok('O'), 1);
});
my $t_o1 = time;    # o1's lock began before this
my $settler = $node->background_psql('review', on_error_stop => 0);
$settler->query_safe('BEGIN');
$settler->query_safe(q{SELECT sbq_abandon('rolled', tok('o1'))});
usleep(3_000_000);
ok(sql('review', q{SELECT sbq_renew_session('rolled', tok('O')) > now() + interval '9 s'}),
	'the session is renewed while another transaction abandons o1');
$settler->query_safe('ROLLBACK');
$settler->quit;
# past o1's first expiry
usleep(int(($t_o1 + 10.5 - time) * 1e6)) if $t_o1 + 10.5 > time;
is(sql('review', q{SELECT try($$SELECT sbq_complete('rolled', tok('o1'))$$)}), 'ok',
	'that abandon rolled back: past o1\'s first expiry, under the renewed session lock, o1 completes');
is(sql('review', q{SELECT count(*) FROM sbq_peek('rolled/$deadletterqueue', 10)}), '0',
	'... and was never dead-lettered as an expired last delivery');

### the update from 0.7 waits for a session lock taken in a row by an open transaction
sql('postgres', 'CREATE DATABASE upd');
sql('upd', "CREATE EXTENSION sbqueue VERSION '0.7'");
sql('upd', $try_fn);
sql('upd', q{
	SELECT sbq_create_queue('q', requires_session => true);
	SELECT sbq_send('q', 'u1', session_id => 'U');
});
my $rowlock = $node->background_psql('upd', on_error_stop => 0);
$rowlock->query_safe('BEGIN');
$rowlock->query_safe(q{INSERT INTO tok SELECT 'U', session_token FROM sbq_accept_session('q', 'U')});
my $upd = $node->background_psql('upd', on_error_stop => 0);
$upd->query_until(qr/started/, q{
	\echo started
	ALTER EXTENSION sbqueue UPDATE TO '0.8';
});
ok($node->poll_query_until('upd', q{
	SELECT count(*) > 0 FROM pg_stat_activity
	 WHERE wait_event_type = 'Lock' AND query LIKE 'ALTER EXTENSION%'}),
	'ALTER EXTENSION UPDATE TO 0.8 waits for a transaction that accepted a session in its row (0.7)');
$rowlock->query_safe('COMMIT');
$upd->quit;
is(sql('upd', q{SELECT extversion FROM pg_extension WHERE extname = 'sbqueue'}), '0.8',
	'... and updates once it committed');
is(sql('upd', q{SELECT try($$SELECT sbq_accept_session('q', 'U')$$)}), 'error SB005',
	'then U, held in its row, cannot be accepted in shared memory by another');
is(sql('upd', q{SELECT convert_from(body, 'UTF8') FROM sbq_receive_session('q', tok('U'))}), 'u1',
	'... and its holder receives under the lock taken before the update');
$rowlock->quit;

### the release of a session its holder drained
# The release reads the session's mark and what is leased under it in one look,
# before it ends those leases. A send in flight keeps the session; one that
# committed, or a deferred message, is not forgotten with it. The holder keeps
# one connection.
new_db('drain');
sql('drain', q{SELECT sbq_create_queue('q', requires_session => true)});
my $h = $node->background_psql('drain', on_error_stop => 0);
$h->query_safe(q{SET lock_timeout = '5s'});
# accept E by name, complete what a receive brings, receive again: how many
sub drain_e
{
	$h->query_safe(q{DELETE FROM tok; INSERT INTO tok SELECT 'E', session_token
	                 FROM sbq_accept_session('q', 'E')});
	$h->query_safe(q{SELECT sbq_complete('q', lock_token)
	                 FROM sbq_receive_session('q', tok('E'), 10)});
	return $h->query_safe(q{SELECT count(*) FROM sbq_receive_session('q', tok('E'), 10)});
}
# accept-next, receive, complete, release: what it got
sub next_e
{
	return sql('drain', q{
		WITH a AS MATERIALIZED (SELECT * FROM sbq_accept_session('q')),
		     m AS MATERIALIZED (SELECT a.session_id, r.body, r.lock_token
		                          FROM a, sbq_receive_session('q', a.session_token, 10) r),
		     c AS MATERIALIZED (SELECT sbq_complete('q', lock_token) FROM m),
		     x AS MATERIALIZED (SELECT sbq_release_session('q', a.session_token) FROM a
		                         WHERE (SELECT count(*) FROM c) >= 0)
		SELECT string_agg(session_id || ' ' || convert_from(body, 'UTF8'), ', ')
		  FROM m, (SELECT count(*) FROM x) released});
}
sql('drain', q{SELECT sbq_send('q', 'e1', session_id => 'E')});
is(drain_e(), '0', 'E drained');
is($h->query_safe(q{SELECT count(*) FROM (SELECT sbq_release_session('q', tok('E'))) r}), '1', 'and released');
is(sql('drain', q{SELECT count(*) FROM sbq.sessions}), '0', 'so E is forgotten');

sql('drain', q{SELECT sbq_send('q', 'e2', session_id => 'E')});
is(drain_e(), '0', 'E drained again');
my $sender = $node->background_psql('drain', on_error_stop => 0);
$sender->query_safe(q{BEGIN; SELECT sbq_send('q', 'e3', session_id => 'E')});
is($h->query_safe(q{SELECT count(*) FROM (SELECT sbq_release_session('q', tok('E'))) r}), '1',
	'the release of a drained session does not wait for a send in flight');
$sender->query_safe('COMMIT');
$sender->quit;
is(next_e(), 'E e3', 'and that send is served: E stayed in line');

is(drain_e(), '0', 'E drained once more');
sql('drain', q{SELECT sbq_send('q', 'e4', session_id => 'E')});
is($h->query_safe(q{SELECT count(*) FROM (SELECT sbq_release_session('q', tok('E'))) r}), '1',
	'released after a send committed');
is(next_e(), 'E e4', 'that send is served: the release put E back in line');

sql('drain', q{SELECT sbq_send('q', 'e5', session_id => 'E')});
$h->query_safe(q{DELETE FROM tok; INSERT INTO tok SELECT 'E', session_token
                 FROM sbq_accept_session('q', 'E')});
my $e5 = $h->query_safe(q{SELECT sequence_number || ' ' || (sbq_defer('q', lock_token)::text = '')
                         FROM sbq_receive_session('q', tok('E'), 10)});
like($e5, qr/^\d+ true$/, 'e5 deferred');
$e5 =~ s/ true$//;
is($h->query_safe(q{SELECT count(*) FROM sbq_receive_session('q', tok('E'), 10)}), '0',
	'E has no active message left');
is($h->query_safe(q{SELECT count(*) FROM (SELECT sbq_release_session('q', tok('E'))) r}), '1', 'released');
is(next_e(), '', 'accept-next finds nothing');

# a settlement in flight under the lock: the release waits for it while it holds
# no lock of the session's row, so the settler's send to the session does not
# wait for it (nor deadlock); then E stays for that send. Again with nothing
# sent: the session the settlement emptied is forgotten.
sub release_waits_for
{
	my ($send, $what) = @_;
	$h->query_safe(q{DELETE FROM tok; INSERT INTO tok SELECT 'E', session_token
	                 FROM sbq_accept_session('q', 'E')});
	is($h->query_safe(q{SELECT count(*) FROM sbq_receive_session('q', tok('E'), 10)}), '0',
		"$what: E has no active message");
	my $tok = $h->query_safe(qq{SELECT lock_token FROM
	                 sbq_receive_deferred('q', ARRAY[${e5}::bigint], tok('E'))});
	like($tok, qr/^[0-9a-f-]{36}$/, "$what: the deferred message is received by the holder");
	my $settler = $node->background_psql('drain', on_error_stop => 0);
	$settler->query_safe(qq{SET lock_timeout = '5s'; BEGIN; SELECT sbq_complete('q', '$tok')});
	$h->query_until(qr/started/, q{
		\echo started
		SELECT count(*) FROM (SELECT sbq_release_session('q', tok('E'))) r;
	});
	ok($node->poll_query_until('drain', q{
		SELECT count(*) > 0 FROM pg_stat_activity
		 WHERE wait_event_type = 'Lock' AND query LIKE '%sbq_release_session%'}),
		"$what: the release waits for the completion in flight");
	if ($send)
	{
		is($settler->query_safe(q{SELECT count(*) FROM
		                          (SELECT sbq_send('q', 'e7', session_id => 'E')) s}), '1',
			"$what: the settler sends to E without waiting for the release");
	}
	$settler->query_safe('COMMIT');
	$settler->quit;
	ok($node->poll_query_until('drain', q{
		SELECT count(*) = 0 FROM pg_stat_activity
		 WHERE wait_event_type = 'Lock' AND query LIKE '%sbq_release_session%'}),
		"$what: the release ends when the settler commits");
	$h->query_safe('SELECT 1');
}
release_waits_for(1, 'with a send');
is(next_e(), 'E e7', 'E stayed in line for the send');
sql('drain', q{SELECT sbq_send('q', 'e8', session_id => 'E')});
$h->query_safe(q{DELETE FROM tok; INSERT INTO tok SELECT 'E', session_token
                 FROM sbq_accept_session('q', 'E')});
$e5 = $h->query_safe(q{SELECT sequence_number || ' ' || (sbq_defer('q', lock_token)::text = '')
                      FROM sbq_receive_session('q', tok('E'), 10)});
$e5 =~ s/ true$//;
$h->query_safe(q{SELECT count(*) FROM (SELECT sbq_release_session('q', tok('E'))) r});
release_waits_for(0, 'without');
is(sql('drain', q{SELECT count(*) FROM sbq.sessions}), '0',
	'the session the settlement emptied is forgotten');
$h->quit;

### DROP and CREATE EXTENSION: a session of the new one is not held by the old lock
new_db('reborn');
sql('reborn', q{
	SELECT sbq_create_queue('q', requires_session => true, lock_duration => '5 minutes');
	SELECT sbq_send('q', 'old', session_id => 'S');
	INSERT INTO tok SELECT 'old', session_token FROM sbq_accept_session('q', 'S');
});
my $old_key = sql('reborn', q{SELECT session_key FROM sbq.sessions});
sql('reborn', q{DROP EXTENSION sbqueue; CREATE EXTENSION sbqueue});
sql('reborn', q{
	SELECT sbq_create_queue('q', requires_session => true);
	SELECT sbq_send('q', 'new', session_id => 'S');
});
is(sql('reborn', q{SELECT session_key FROM sbq.sessions}), $old_key,
	'the new extension numbers its session S as the old one did');
is(sql('reborn', q{SELECT locked_session_count FROM sbq_queue_stats}), '0',
	'the new S is not held');
is(sql('reborn', q{SELECT convert_from(m.body, 'UTF8') FROM sbq_accept_session('q', 'S') a,
                   LATERAL sbq_receive_session('q', a.session_token) m}), 'new',
	'it is accepted by name and its message received');
is(sql('reborn', q{SELECT try($$SELECT sbq_renew_session('q', tok('old'))$$)}), 'error SB004',
	'the old extension\'s token is lost');

$node->stop;
done_testing();
