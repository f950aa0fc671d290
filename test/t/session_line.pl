# Copyright (c) 2026, the sbqueue authors
#
# The floor of a session queue's line (src/qstate.c, src/session_probe.c):
# accept-next starts its walk of the line where every entry below is gone
# for good, so a transaction held open elsewhere, which keeps the entries
# of every session drained since, does not make each accept-next pass them.
#	- with a REPEATABLE READ transaction open, 400 sessions drained one at a
#	  time: the next accept-next reads a few entries of the line's index,
#	  not the 400 (pg_stat_get_xact_tuples_returned of the index);
#	- a session whose lock was stored in its row (taken under the SQL of
#	  0.7, released after the update) comes back into the line below the
#	  floor that walks raised meanwhile: the release lowers it, and the next
#	  accept-next takes that session;
#	- a walk in a transaction that drained and forgot a session does not
#	  pass its entry: the transaction rolls back, and the session, its
#	  message back, is accepted next;
#	- a send in flight to a new session, seen by a walk, is accepted once
#	  it commits;
#	- nine held sessions that a walk passed over go to the back of the line
#	  (marks above every message); one of them, released with a message
#	  left, stays there, behind the session that was in line before it, and
#	  is taken after that one;
#	- a session held at the front of the line while 300 others are drained
#	  under a held snapshot goes to the back once a walk has passed many
#	  entries gone behind it, so that later walks do not read them;
#	- with no snapshot held, walks mark the entries of drained sessions dead
#	  in the index: after maintenance drops the floor, the walk from the
#	  start of the line does not read them one by one;
#	- behind 1,100 held sessions, more than one walk looks at, a free
#	  session is taken within three calls (the next call goes on where the
#	  last ran out of looks).
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/../harness";
use SbqNode;

my $node = SbqNode::preloaded('session_line');

sub sql { return $node->safe_psql($_[1] // 'postgres', $_[0]); }

sql(q{
	CREATE EXTENSION sbqueue;
	SELECT sbq_create_queue('sl', requires_session => true);
	CREATE PROCEDURE drain(q text, n int) LANGUAGE plpgsql AS $$
	DECLARE
		t uuid;
	BEGIN
		FOR i IN 1 .. n LOOP
			SELECT session_token INTO t FROM sbq_accept_session(q);
			EXIT WHEN t IS NULL;
			PERFORM sbq_complete(q, m.lock_token) FROM sbq_receive_session(q, t, 10) m;
			PERFORM sbq_release_session(q, t);
			COMMIT;
		END LOOP;
	END $$;
});

# accept-next on queue $q in a transaction of its own: "session id:entries of
# the line's index it read"; the session is released before the commit
sub accept_next
{
	my ($q, $db) = @_;
	my $out = sql(qq{
		BEGIN;
		CREATE TEMP TABLE r0 ON COMMIT DROP AS
			SELECT pg_stat_get_xact_tuples_returned('sbq.sessions_ready_idx'::regclass) AS n;
		CREATE TEMP TABLE a ON COMMIT DROP AS SELECT * FROM sbq_accept_session('$q');
		SELECT coalesce((SELECT session_id FROM a), '(none)') || ':' ||
			(pg_stat_get_xact_tuples_returned('sbq.sessions_ready_idx'::regclass) - (SELECT n FROM r0));
		SELECT sbq_release_session('$q', session_token) FROM a;
		COMMIT;
	}, $db);
	return (grep { /:/ } split /\n/, $out)[0];
}

# A REPEATABLE READ transaction held open in a session of its own, its
# snapshot taken
sub hold_snapshot
{
	my $h = $node->background_psql('postgres');
	$h->query_safe('BEGIN ISOLATION LEVEL REPEATABLE READ');
	$h->query_safe('SELECT count(*) FROM sbq.sessions');
	return $h;
}

# One message to each of $n new sessions of queue $q (ids $prefix0001 ...),
# every session of $q drained one at a time, then a message to session $last:
# what accept_next says then, split
sub drain_then_accept
{
	my ($q, $prefix, $n, $last) = @_;
	sql(qq{SELECT count(sbq_send('$q', 'm', session_id => '$prefix' || lpad(i::text, 4, '0')))
	         FROM generate_series(1, $n) i});
	sql(qq{CALL drain('$q', 10000)});
	sql(qq{SELECT sbq_send('$q', 'm', session_id => '$last')});
	return split /:/, accept_next($q);
}

# --- 1. a held snapshot: the line's dead entries are passed once, not every time
my $held = hold_snapshot();
my ($sid, $reads) = drain_then_accept('sl', 's', 400, 'last');
is(sql(q{SELECT count(*) FROM sbq.messages WHERE session_id <> 'last'}), '0', 'the 400 sessions were drained');
is($held->query_safe(q{SELECT count(*) FROM sbq.sessions}), '0',
	'the transaction held open began before them');
is($sid, 'last', 'accept-next takes the session sent to after the drains');
cmp_ok($reads, '<=', 10,
	"accept-next read $reads entries of the line, not the 400 the drains left behind");

# the floor stays where walks found no entry below it: more drains, same cost
($sid, $reads) = drain_then_accept('sl', 't', 200, 'last2');
is($sid, 'last2', 'and after 200 more drains, the next one');
cmp_ok($reads, '<=', 10, "reading $reads entries");
sql(q{CALL drain('sl', 10)});
$held->query_safe('COMMIT');
$held->quit;

# --- 2. a lock stored in a session's row, released below the floor
sql(q{CREATE DATABASE old});
sql(q{CREATE EXTENSION sbqueue VERSION '0.7';
	SELECT sbq_create_queue('so', requires_session => true);
	SELECT sbq_send('so', 'a1', session_id => 'A');
	SELECT sbq_send('so', 'a2', session_id => 'A');
	SELECT sbq_send('so', 'b1', session_id => 'B');}, 'old');
my $rowholder = $node->background_psql('old');
$rowholder->query_safe(q{
	CREATE TEMP TABLE tok AS SELECT session_token AS t FROM sbq_accept_session('so', 'A')});
is($rowholder->query_safe(q{
		SELECT string_agg(convert_from(m.body, 'UTF8'), ',')
		  FROM sbq_receive_session('so', (SELECT t FROM tok), 1) m,
		       LATERAL (SELECT sbq_complete('so', m.lock_token)) c}),
	'a1', 'a holder under the SQL of 0.7 has a1 of session A');
is(sql(q{SELECT count(*) FROM sbq.sessions WHERE session_id = 'A' AND session_token IS NOT NULL
	           AND ready_seq IS NULL}, 'old'),
	'1', 'its lock is stored in the row, and the session is out of line');
sql(q{ALTER EXTENSION sbqueue UPDATE}, 'old');

# a walk raises the floor to B, and a holder keeps B
my $bholder = $node->background_psql('old');
is($bholder->query_safe(q{
		CREATE TEMP TABLE tok AS SELECT * FROM sbq_accept_session('so');
		SELECT session_id FROM tok}),
	'B', 'after the update, accept-next takes B, the only session in line');
is((split /:/, accept_next('so', 'old'))[0], '(none)', 'and then finds none free');

# the row's lock is released: A is back in line, below where the walks began
$rowholder->query_safe(q{SELECT sbq_release_session('so', (SELECT t FROM tok))});
is(sql(q{SELECT ready_seq < (SELECT ready_seq FROM sbq.sessions WHERE session_id = 'B')
           FROM sbq.sessions WHERE session_id = 'A'}, 'old'),
	't', 'the release put A in line ahead of B');
is((split /:/, accept_next('so', 'old'))[0], 'A', 'accept-next takes A');
$rowholder->quit;
$bholder->quit;

# --- 3. a walk in a transaction that forgot a session, rolled back
sql(q{SELECT sbq_create_queue('sr', requires_session => true);
	SELECT sbq_send('sr', 'x', session_id => 'X');
	SELECT sbq_send('sr', 'y', session_id => 'Y');});
is((split /\n/, sql(q{
	BEGIN;
	CREATE TEMP TABLE a ON COMMIT DROP AS SELECT * FROM sbq_accept_session('sr');
	SELECT sbq_complete('sr', m.lock_token)
	  FROM sbq_receive_session('sr', (SELECT session_token FROM a), 10) m;
	SELECT sbq_release_session('sr', session_token) FROM a;
	SELECT (SELECT session_id FROM a) || ',' || (SELECT count(*) FROM sbq.sessions WHERE session_id = 'X')
	       || ',' || (SELECT session_id FROM sbq_accept_session('sr'));
	ROLLBACK;}))[-1],
	'X,0,Y', 'a transaction drains X, which goes, and its next accept takes Y');
is((split /:/, accept_next('sr'))[0], 'X', 'rolled back: accept-next takes X again');

# --- 4. a send in flight to a new session, seen by a walk
my $sender = $node->background_psql('postgres');
$sender->query_safe(q{BEGIN; SELECT sbq_send('sr', 'z', session_id => 'Z')});
sql(q{CALL drain('sr', 10)});
is((split /:/, accept_next('sr'))[0], '(none)', 'the line is drained, and Z not yet sent');
$sender->query_safe('COMMIT');
$sender->quit;
is((split /:/, accept_next('sr'))[0], 'Z', 'the send committed: accept-next takes Z');

# --- 5. held sessions moved to the back, one released with a message left
sql(q{SELECT sbq_create_queue('sm', requires_session => true);
	SELECT count(sbq_send('sm', 'h' || i || '-' || j, session_id => 'h' || i))
	  FROM generate_series(1, 9) i, generate_series(1, 2) j;
	SELECT sbq_send('sm', 'f', session_id => 'free');});
my @holders;
for my $i (1 .. 9)
{
	my $h = $node->background_psql('postgres');
	$h->query_safe(qq{
		CREATE TEMP TABLE tok AS SELECT session_token AS t FROM sbq_accept_session('sm', 'h$i')});
	push @holders, $h;
}
is((split /:/, accept_next('sm'))[0], 'free', 'accept-next passes the nine held sessions, takes free');
is(sql(q{SELECT bool_and(h.ready_seq > f.ready_seq)
           FROM sbq.sessions h, sbq.sessions f
          WHERE h.session_id LIKE 'h%' AND f.session_id = 'free'}),
	't', 'and moves them to the back of the line');
is((split /:/, accept_next('sm'))[0], 'free', 'the next walk takes free again');
is($holders[0]->query_safe(q{
		SELECT string_agg(convert_from(m.body, 'UTF8'), ',')
		  FROM sbq_receive_session('sm', (SELECT t FROM tok), 1) m,
		       LATERAL (SELECT sbq_complete('sm', m.lock_token)) c}),
	'h1-1', 'the holder of h1 completes its first message');
$holders[0]->query_safe(q{SELECT sbq_release_session('sm', (SELECT t FROM tok))});
is(sql(q{SELECT h.ready_seq > f.ready_seq FROM sbq.sessions h, sbq.sessions f
          WHERE h.session_id = 'h1' AND f.session_id = 'free'}),
	't', 'released with h1-2 left, h1 stays at the back of the line');
my $freeholder = $node->background_psql('postgres');
is($freeholder->query_safe(q{SELECT session_id FROM sbq_accept_session('sm')}), 'free',
	'accept-next takes free, ahead of it');
is((split /:/, accept_next('sm'))[0], 'h1', 'and then h1');
$freeholder->quit;
$_->quit for @holders;

# --- 6. a session held at the front, and many drained behind it
sql(q{SELECT sbq_create_queue('sh', requires_session => true);
	SELECT sbq_send('sh', 'f', session_id => 'front');});
my $front = $node->background_psql('postgres');
$front->query_safe(q{CREATE TEMP TABLE tok AS SELECT session_token AS t FROM sbq_accept_session('sh', 'front')});
$held = hold_snapshot();
($sid, $reads) = drain_then_accept('sh', 'd', 300, 'tail');
is($sid, 'tail', 'with front held, accept-next takes the session sent to after 300 drains');
cmp_ok($reads, '<=', 10, "reading $reads entries of the line");
is(sql(q{SELECT s.ready_seq > (SELECT m.sequence_number FROM sbq.messages m WHERE m.session_id = 'front')
           FROM sbq.sessions s WHERE s.session_id = 'front'}),
	't', 'front went to the back of the line, behind its message');
$front->query_safe(q{SELECT sbq_release_session('sh', (SELECT t FROM tok))});
$front->quit;
is((split /:/, accept_next('sh'))[0], 'front', 'released, front is taken next');
$held->query_safe('COMMIT');
$held->quit;

# --- 7. no snapshot held: the entries of drained sessions are marked dead
sql(q{SELECT sbq_create_queue('sk', requires_session => true)});
($sid, $reads) = drain_then_accept('sk', 'k', 300, 'kfirst');
is($sid, 'kfirst', 'with no snapshot held, 300 sessions drained, and the next one taken');
sql(q{CALL drain('sk', 10)});
sql(q{SELECT sbq_maintain()});
sql(q{SELECT sbq_send('sk', 'm', session_id => 'klast')});
($sid, $reads) = split /:/, accept_next('sk');
is($sid, 'klast', 'after maintenance dropped the floor, accept-next takes the last session');
cmp_ok($reads, '<=', 10, "reading $reads entries of the line, not the 300 drained before");

# --- 8. more held sessions in front than one walk looks at (R9.4): each
# call gave up after 1,000 held ones, and the next walked the same again
sql(q{SELECT sbq_create_queue('s_many', requires_session => true, lock_duration => '5 minutes')});
sql(q{SELECT count(*) FROM sbq_send_batch('s_many', ARRAY(SELECT sbq_new_message('m'::text, session_id => 'h' || g)
		FROM generate_series(1, 1100) g, generate_series(1, 2)))});
sql(q{CREATE TABLE s_many_tok (session_id text, token uuid)});
sql(q{DO $$
	DECLARE
		a record;
	BEGIN
		FOR i IN 1 .. 1100 LOOP
			SELECT * INTO a FROM sbq_accept_session('s_many');
			INSERT INTO s_many_tok VALUES (a.session_id, a.session_token);
			PERFORM sbq_receive_session('s_many', a.session_token, 1);
			COMMIT;
		END LOOP;
	END $$});
is(sql(q{SELECT count(*) FROM sbq_list_sessions('s_many') WHERE locked_until IS NOT NULL}), '1100',
	'1,100 sessions held, each with a message left');
sql(q{SELECT sbq_send('s_many', 'live', session_id => 'LIVE')});
my @got = map { (split /:/, accept_next('s_many'))[0] } 1 .. 3;
ok((grep { $_ eq 'LIVE' } @got), 'accept-next takes the free session behind them within three calls (got '
	. join(', ', @got) . ')');
is(sql(q{SELECT session_id FROM sbq_accept_session('s_many', max_wait => '3 seconds')}), 'LIVE',
	'and again with max_wait: it is free again after the release');
# the walks go on from behind the 1,000 held sessions now; one of those in
# front, released with its messages left, is first in line again, before
# sessions sent to since (before, the walks kept starting behind it)
sql(q{SELECT sbq_release_session('s_many', token) FROM s_many_tok WHERE session_id = 'h1'});
sql(q{SELECT sbq_send('s_many', 'new', session_id => 'N' || i) FROM generate_series(1, 3) i});
is((split /:/, accept_next('s_many'))[0], 'h1',
	'a held session in front, released with messages left, is taken before newer ones');

$node->stop;
done_testing();
