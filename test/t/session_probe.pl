# Copyright (c) 2026, the sbqueue authors
#
# The receive that finds a held session empty (src/session_probe.c): two
# index probes decide it, and the statement that reads a session's next
# messages runs only when they see a message in state 0 (or cannot tell).
#	- a drained session's receive runs no such statement (pg_stat_statements
#	  counts them), for the superuser and for a role with only listen; the
#	  first receive after accept-next runs it without probing;
#	- what the probes must still see, each handed out: a message the
#	  holder's own open transaction sent after draining the session, one
#	  another transaction committed meanwhile, one that comes back when the
#	  holder's completions roll back; a message whose time to live has
#	  passed is still dead-lettered by the receive;
#	- under REPEATABLE READ the receive sees what the transaction's snapshot
#	  sees, no more;
#	- with the session index dropped, made again or rebuilt concurrently
#	  (while a holder's backend kept what it had looked up), receives go on
#	  without an error and hand out the same messages;
#	- accept-next walks its line and looks at each session through the
#	  indexes, and a release of a drained session reads it through them:
#	  none of the statements they replace runs, a session whose only message
#	  expired and a held one are passed over, a drained session is
#	  forgotten, one with a deferred message or with state stays, out of
#	  line; a walk past twenty held sessions finds the free one after them;
#	- an index in another collation, or the line's index without its
#	  predicate, is not read: the statements run.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/../harness";
use SbqNode;

my $node = SbqNode::preloaded('session_probe', qq(
shared_preload_libraries = 'sbqueue, pg_stat_statements'
pg_stat_statements.track = all
));

sub sql { return $node->safe_psql('postgres', $_[0]); }

sql(q{
	CREATE EXTENSION sbqueue;
	CREATE EXTENSION pg_stat_statements;
	SELECT sbq_create_queue('sq', requires_session => true, dead_lettering_on_message_expiration => true);
	CREATE ROLE app LOGIN;
	SELECT sbq_grant('sq', 'app', ARRAY['send', 'listen']);
});

# how many times the statement that reads a session's next messages ran
sub candidates
{
	return sql(q{
		SELECT coalesce(sum(calls), 0) FROM pg_stat_statements
		 WHERE query LIKE '%FROM sbq.messages m%m.session_id = (SELECT s.session_id%'
		   AND query NOT LIKE '%pg_stat_statements%'});
}

# A holder in a session of its own: accepts $sid, which has $n messages.
sub holder
{
	my ($sid, $n, %opt) = @_;
	sql("SELECT count(sbq_send('sq', 'm' || i, session_id => '$sid')) FROM generate_series(1, $n) i");
	my $h = $node->background_psql('postgres', on_error_stop => 0);
	$h->query_safe("SET ROLE $opt{role}") if $opt{role};
	$h->query_safe(qq{
		CREATE TEMP TABLE tok AS SELECT session_token AS t FROM sbq_accept_session('sq', '$sid')});
	return $h;
}

# the bodies a receive of up to 10 hands out, completed in the same statement
sub drain
{
	my ($h) = @_;
	return $h->query_safe(q{
		SELECT coalesce(string_agg(convert_from(m.body, 'UTF8'), ',' ORDER BY m.sequence_number), '')
		  FROM sbq_receive_session('sq', (SELECT t FROM tok), 10) m,
		       LATERAL (SELECT sbq_complete('sq', m.lock_token)) c});
}

### 1. an empty session's receive runs no statement
for my $role ('', 'app')
{
	my $h = holder("e$role", 3, role => $role);
	my $label = $role ? 'a role with listen' : 'the superuser';
	is(drain($h), 'm1,m2,m3', "$label: the session's messages are handed out");
	my $before = candidates();
	is(drain($h), '', "$label: then the session is empty");
	is(drain($h), '', "$label: and stays so");
	is(candidates() - $before, 0,
		"$label: the receives of the empty session ran no statement reading its messages");
	$h->quit;
}

### accepted as the next session: its first receive goes to the statement, the next probe
{
	sql(q{SELECT sbq_send('sq', 'n1', session_id => 'next')});
	my $h = $node->background_psql('postgres', on_error_stop => 0);
	is($h->query_safe(q{
		CREATE TEMP TABLE tok AS SELECT session_token AS t, session_id FROM sbq_accept_session('sq');
		SELECT session_id FROM tok}), 'next', 'next: accept-next takes the session with a message');
	my $before = candidates();
	is(drain($h), 'n1', 'next: its message is handed out');
	is(candidates() - $before, 1, 'next: by the statement');
	is(drain($h), '', 'next: then it is empty');
	is(candidates() - $before, 1, 'next: which the probes tell');
	$h->quit;
}

### 2. what the probes must see
{
	my $h = holder('own', 2);
	is(drain($h), 'm1,m2', 'own: drained');
	$h->query_safe('BEGIN');
	$h->query_safe(q{SELECT sbq_send('sq', 'mine', session_id => 'own')});
	is(drain($h), 'mine', "own: a message the holder's open transaction sent is handed out");
	$h->query_safe('COMMIT');
	# the send and the receive in one statement: the receive's look must see
	# the row the send stored under the statement's current command
	is($h->query_safe(q{
		WITH s AS MATERIALIZED (SELECT sbq_send('sq', 'same', session_id => 'own') AS seq)
		SELECT string_agg(convert_from(m.body, 'UTF8'), ',')
		  FROM s, LATERAL sbq_receive_session('sq', (SELECT t FROM tok), 10 + (s.seq * 0)::int) m,
		       LATERAL (SELECT sbq_complete('sq', m.lock_token)) c}),
		'same', 'own: a message sent earlier in the same statement is handed out');
	is(drain($h), '', 'own: and completed');

	sql(q{SELECT sbq_send('sq', 'theirs', session_id => 'own')});
	is(drain($h), 'theirs', 'own: one another transaction committed since is handed out');

	sql(q{SELECT sbq_send('sq', 'again', session_id => 'own')});
	$h->query_safe('BEGIN');
	is(drain($h), 'again', 'own: handed out and completed in a transaction');
	is(drain($h), '', 'own: the session is then empty in that transaction');
	$h->query_safe('ROLLBACK');
	is(drain($h), 'again', 'own: after the rollback the message is handed out again');
	$h->quit;
}
{
	sql(q{SELECT sbq_send('sq', 'old', session_id => 'ttl', time_to_live => '1 second')});
	my $h = holder('ttl', 0);
	sleep 2;
	my $before = sql(q{SELECT dead_letter_count FROM sbq_queue_stats WHERE queue = 'sq'});
	is(drain($h), '', 'ttl: a message whose time to live passed is not handed out');
	is(sql(q{SELECT dead_letter_count FROM sbq_queue_stats WHERE queue = 'sq'}) - $before, 1,
		'ttl: the receive dead-lettered it');
	$h->quit;
}

### 3. REPEATABLE READ: the transaction's snapshot
{
	my $h = holder('rr', 1);
	is(drain($h), 'm1', 'rr: drained');
	$h->query_safe('BEGIN ISOLATION LEVEL REPEATABLE READ');
	is(drain($h), '', 'rr: empty in a REPEATABLE READ transaction');
	sql(q{SELECT sbq_send('sq', 'later', session_id => 'rr')});
	is(drain($h), '', 'rr: a message committed after its snapshot is not seen in it');
	$h->query_safe('COMMIT');
	is(drain($h), 'later', 'rr: the next transaction hands it out');
	$h->quit;
}

### 4. the session index dropped, made again, rebuilt
{
	my $h = holder('idx', 2);
	is(drain($h), 'm1,m2', 'idx: drained (the holder has looked the index up)');
	is(drain($h), '', 'idx: empty');
	sql('DROP INDEX sbq.messages_session_idx');
	sql(q{SELECT sbq_send('sq', 'noidx', session_id => 'idx')});
	is(drain($h), 'noidx', 'idx: without the index, a receive hands out what came');
	is(drain($h), '', 'idx: and finds the session empty after');
	sql(q{CREATE INDEX messages_session_idx ON sbq.messages (queue_id, session_id, state, sequence_number)
	       WHERE session_id IS NOT NULL});
	sql(q{SELECT sbq_send('sq', 'newidx', session_id => 'idx')});
	is(drain($h), 'newidx', 'idx: with the index made again, a receive hands out what came');
	my $before = candidates();
	is(drain($h), '', 'idx: and finds the session empty after');
	is(candidates() - $before, 0, 'idx: with no statement, through the new index');
	sql('REINDEX INDEX CONCURRENTLY sbq.messages_session_idx');
	is(drain($h), '', 'idx: after a concurrent rebuild the session is still empty, without an error');
	sql(q{SELECT sbq_send('sq', 'rebuilt', session_id => 'idx')});
	is(drain($h), 'rebuilt', 'idx: and what comes next is handed out');
	$before = candidates();
	is(drain($h), '', 'idx: empty again');
	is(candidates() - $before, 0, 'idx: with no statement, through the rebuilt index');
	$h->quit;
}

### 5. accept-next and release through the indexes
# how many times statements whose text matches $like ran
sub calls
{
	my ($like) = @_;
	return sql(qq{
		SELECT coalesce(sum(calls), 0) FROM pg_stat_statements
		 WHERE query LIKE '$like' AND query NOT LIKE '%pg_stat_statements%'});
}
my %stmt = (
	line => '%FROM sbq.sessions s WHERE s.queue_id = $1 AND s.ready_seq IS NOT NULL%',
	look => '%SELECT s.session_token IS NOT NULL,%EXISTS (SELECT $_ FROM sbq.messages m%',
	release => '%SELECT s.ready_seq, (SELECT m.sequence_number FROM sbq.messages m%ARRAY(SELECT%');
sub all_calls { return join(' ', map { calls($stmt{$_}) } sort keys %stmt); }
{
	sql(q{
		SELECT sbq_create_queue('aq', requires_session => true);
		SELECT sbq_send('aq', 'gone', session_id => 'x-exp', time_to_live => '1 second');
		SELECT sbq_send('aq', 'h', session_id => 'x-held');
		SELECT sbq_send('aq', 'ok', session_id => 'x-ok');
	});
	my $other = $node->background_psql('postgres', on_error_stop => 0);
	$other->query_safe(q{SELECT count(*) FROM sbq_accept_session('aq', 'x-held')});
	sleep 2;
	my $h = $node->background_psql('postgres', on_error_stop => 0);
	my $before = all_calls();
	is($h->query_safe(q{
		CREATE TEMP TABLE tok AS SELECT session_token AS t, session_id FROM sbq_accept_session('aq');
		SELECT session_id FROM tok}), 'x-ok',
		'line: accept-next passes over a session whose only message expired and one held, and takes the next');
	is(sql(q{SELECT ready_seq IS NULL FROM sbq.sessions WHERE session_id = 'x-exp'}), 't',
		'line: the session with nothing available left the line');
	is(sql(q{SELECT ready_seq IS NOT NULL FROM sbq.sessions WHERE session_id = 'x-held'}), 't',
		'line: the held one stays in line');
	is($h->query_safe(q{
		SELECT string_agg(convert_from(m.body, 'UTF8'), ',')
		  FROM sbq_receive_session('aq', (SELECT t FROM tok), 10) m,
		       LATERAL (SELECT sbq_complete('aq', m.lock_token)) c}), 'ok', 'line: its message');
	$h->query_safe(q{SELECT sbq_release_session('aq', (SELECT t FROM tok))});
	is(sql(q{SELECT count(*) FROM sbq.sessions WHERE session_id = 'x-ok'}), '0',
		'release: a drained session with no state is forgotten');
	is(all_calls(), $before,
		'line, release: accept-next, the drain and the release ran none of the statements the indexes replace');

	# a deferred message, and state: the session stays, out of line
	sql(q{SELECT sbq_send('aq', 'd', session_id => 'x-def'); SELECT sbq_send('aq', 's', session_id => 'x-state')});
	$h->query_safe(q{
		DROP TABLE tok;
		CREATE TEMP TABLE tok AS SELECT session_token AS t FROM sbq_accept_session('aq', 'x-def');
		SELECT sbq_defer('aq', m.lock_token) FROM sbq_receive_session('aq', (SELECT t FROM tok), 10) m;
		SELECT sbq_release_session('aq', (SELECT t FROM tok));
		DROP TABLE tok;
		CREATE TEMP TABLE tok AS SELECT session_token AS t FROM sbq_accept_session('aq', 'x-state');
		SELECT sbq_complete('aq', m.lock_token) FROM sbq_receive_session('aq', (SELECT t FROM tok), 10) m;
		SELECT sbq_set_session_state('aq', (SELECT t FROM tok), '\x01');
		SELECT sbq_release_session('aq', (SELECT t FROM tok));
	});
	is(sql(q{SELECT string_agg(session_id || ' ' || (ready_seq IS NULL)::text, ',' ORDER BY session_id)
	          FROM sbq.sessions WHERE session_id IN ('x-def', 'x-state')}), 'x-def true,x-state true',
		'release: a session with a deferred message, and one with state, stay, out of line');
	$h->quit;
	$other->quit;
}

### 6. a long line, and indexes that are not the ones the looks know
{
	# 20 sessions held ahead of a free one: the walk goes past its first
	# sixteen (a snapshot of its own for each sixteen), and the held ones it
	# passed over go to the back of the line
	sql(q{
		SELECT sbq_create_queue('lq', requires_session => true);
		SELECT count(sbq_send('lq', 'h', session_id => 'h' || lpad(i::text, 2, '0'))) FROM generate_series(1, 20) i;
		SELECT sbq_send('lq', 'free', session_id => 'free');
	});
	my $other = $node->background_psql('postgres', on_error_stop => 0);
	is($other->query_safe(q{
		SELECT count(*) FROM generate_series(1, 20) i,
		       LATERAL sbq_accept_session('lq', 'h' || lpad(i::text, 2, '0'))}), '20',
		'long line: 20 sessions held');
	my $before = all_calls();
	is(sql(q{SELECT session_id FROM sbq_accept_session('lq')}), 'free',
		'long line: accept-next walks past 20 held sessions to the free one');
	is(all_calls(), $before, 'long line: without the statements');
	is(sql(q{SELECT (SELECT min(s.ready_seq) FROM sbq.sessions s WHERE s.session_id LIKE 'h%')
	              > (SELECT max(m.sequence_number) FROM sbq.messages m WHERE m.session_id = 'free')}), 't',
		'long line: the held sessions passed over went to the back of the line');
	$other->quit;

	# an index in another collation, then the line's index without its
	# predicate: each alone keeps the looks from reading the indexes
	my @cases = (
		[ 'coll', q{
			DROP INDEX sbq.messages_session_idx;
			CREATE INDEX messages_session_idx ON sbq.messages (queue_id, session_id COLLATE "C", state, sequence_number)
			    WHERE session_id IS NOT NULL} ],
		[ 'nopred', q{
			DROP INDEX sbq.messages_session_idx;
			CREATE INDEX messages_session_idx ON sbq.messages (queue_id, session_id, state, sequence_number)
			    WHERE session_id IS NOT NULL;
			DROP INDEX sbq.sessions_ready_idx;
			CREATE INDEX sessions_ready_idx ON sbq.sessions (queue_id, ready_seq)} ]);
	for my $case (@cases)
	{
		my ($sid, $ddl) = @$case;
		sql("SELECT sbq_send('lq', '$sid-1', session_id => '$sid')");
		sql($ddl);
		my $h = $node->background_psql('postgres', on_error_stop => 0);
		$before = calls($stmt{line});
		is($h->query_safe(q{
			CREATE TEMP TABLE tok AS SELECT session_token AS t, session_id FROM sbq_accept_session('lq');
			SELECT session_id FROM tok}), $sid, "$sid: accept-next takes the session");
		isnt(calls($stmt{line}), $before, "$sid: by the statement that reads the line");
		$before = candidates();
		is($h->query_safe(q{
			SELECT string_agg(convert_from(m.body, 'UTF8'), ',')
			  FROM sbq_receive_session('lq', (SELECT t FROM tok), 10) m,
			       LATERAL (SELECT sbq_complete('lq', m.lock_token)) c}), "$sid-1", "$sid: its message");
		is($h->query_safe(q{SELECT count(*) FROM sbq_receive_session('lq', (SELECT t FROM tok), 10)}), '0',
			"$sid: then none");
		is(candidates() - $before, 2, "$sid: both receives by the statement");
		$h->quit;
	}
	sql(q{
		DROP INDEX sbq.sessions_ready_idx;
		CREATE INDEX sessions_ready_idx ON sbq.sessions (queue_id, ready_seq) WHERE ready_seq IS NOT NULL;
	});
}

my $log = slurp_file($node->logfile);
unlike($log, qr/ERROR|could not open relation/, 'no error in the server log');

$node->stop;
done_testing();
