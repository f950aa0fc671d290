# Copyright (c) 2026, the sbqueue authors
#
# A plain send stores its row without the SQL executor (src/send_direct.c),
# and a backend keeps what opening the table's indexes builds (their
# IndexInfo) from one send to the next. An index made or dropped while a
# backend keeps them must be seen by its next send, as the INSERT saw it:
#	1. an index made with CREATE INDEX CONCURRENTLY while a backend that
#	   keeps them sends before, during (the build waits for a transaction
#	   that sent) and after it: every row is in the new index (amcheck's
#	   heapallindexed), with no unique-key error;
#	2. a unique index made the same way refuses the same backend's next send
#	   of a duplicate (23505), and stores nothing of it;
#	3. an index of another access method (GIN, on the application
#	   properties): sends through the executor's own opening of indexes, and
#	   every row is in it; after DROP INDEX CONCURRENTLY sends go on;
#	4. a send leaves closed the partial indexes whose predicate is false for
#	   what all its rows share: every row whose predicate holds is still in
#	   each partial index, sbqueue's own (scheduled, time to live, session)
#	   and a DBA's, the one whose predicate reads a column each row has of its
#	   own (the message id) included, for single sends and batches alike.
use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/../harness";
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);
use SbqNode;

my $node = SbqNode::preloaded('send_direct_indexes');
$node->safe_psql('postgres', q{
	CREATE EXTENSION sbqueue;
	CREATE EXTENSION amcheck;
	SELECT sbq_create_queue('sdi');
});
my $qid = $node->safe_psql('postgres', "SELECT queue_id FROM sbq.queues WHERE name = 'sdi'");

# the backend that keeps what it opened, from its first send on
my $a = $node->background_psql('postgres', on_error_stop => 0);
sub send_a
{
	my ($body, %opt) = @_;
	my $mid = $opt{message_id} ? ", message_id => '$opt{message_id}'" : '';
	return $a->query("SELECT sbq_send('sdi', '$body'::text$mid) > 0");
}
for my $i (1 .. 3)
{
	my ($out, $failed) = send_a("before $i");
	is("$failed $out", '0 t', "1: send $i before the index");
}

# wait until session $pid waits for a lock
sub wait_lock_wait
{
	my ($pid) = @_;
	for (1 .. 600)
	{
		return 1
		  if $node->safe_psql('postgres',
			"SELECT wait_event_type = 'Lock' FROM pg_stat_activity WHERE pid = $pid") eq 't';
		usleep(50_000);
	}
	return 0;
}

# every index of sbq.messages holds every row it must (amcheck, heapallindexed)
sub all_indexes_hold
{
	my ($name) = @_;
	my ($ret, $stdout, $stderr) = $node->psql('postgres', q{
		SELECT bt_index_check(c.oid, true) FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
		 WHERE i.indrelid = 'sbq.messages'::regclass
	});
	is("$ret $stderr", '0 ', $name);
}

### 1. CREATE INDEX CONCURRENTLY beside a backend that keeps the indexes it opened
{
	# a transaction that sent, held open: the build waits for it
	my $holder = $node->background_psql('postgres', on_error_stop => 0);
	$holder->query_safe("BEGIN; SELECT sbq_send('sdi', 'held'::text)");
	my $builder = $node->background_psql('postgres', on_error_stop => 0);
	my $bpid = $builder->query_safe('SELECT pg_backend_pid()');
	$builder->query_until(qr/started/, q{
		\echo started
		CREATE INDEX CONCURRENTLY sdi_extra ON sbq.messages (queue_id, message_id);
		\echo built
	});
	ok(wait_lock_wait($bpid), '1: the build waits for the transaction that sent');

	# the index is there, not ready for inserts yet: sends go on
	for my $i (1 .. 3)
	{
		my ($out, $failed) = send_a("during $i");
		is("$failed $out", '0 t', "1: send $i while the index is built");
	}
	$holder->query_safe('COMMIT');
	$holder->quit;
	$builder->query_until(qr/built/, '');
	$builder->quit;
	is($node->safe_psql('postgres', q{
		SELECT indisready AND indisvalid FROM pg_index WHERE indexrelid = 'sbq.sdi_extra'::regclass
	}), 't', '1: the index is built, ready and valid');

	for my $i (1 .. 3)
	{
		my ($out, $failed) = send_a("after $i");
		is("$failed $out", '0 t', "1: send $i after the build");
	}
	my ($ret, $stdout, $stderr) = $node->psql('postgres',
		"SELECT bt_index_check('sbq.sdi_extra', true)");
	is("$ret $stderr", '0 ',
		'1: every row sent before, during and after the build is in the new index');
	is($node->safe_psql('postgres', qq{
		SELECT count(*) FROM sbq.messages WHERE queue_id = $qid
	}), '10', '1: ten messages stored');
}

### 2. a unique index made while the backend keeps them: its next send is checked
{
	$node->safe_psql('postgres', qq{
		CREATE UNIQUE INDEX CONCURRENTLY sdi_unique ON sbq.messages (message_id)
		 WHERE queue_id = $qid
	});
	my ($out, $failed) = send_a('first', message_id => 'dup');
	is("$failed $out", '0 t', '2: a message id sent once');
	($out, $failed) = send_a('second', message_id => 'dup');
	isnt($failed, 0, '2: the same message id again is refused by the new unique index');
	like($a->{stderr}, qr/duplicate key value violates unique constraint "sdi_unique"/,
		'2: ... with the unique violation of that index');
	$a->{stderr} = '';
	is($node->safe_psql('postgres', qq{
		SELECT count(*) FROM sbq.messages WHERE queue_id = $qid AND message_id = 'dup'
	}), '1', '2: nothing of the refused send is stored');
	$node->safe_psql('postgres', 'DROP INDEX CONCURRENTLY sbq.sdi_unique');
	($out, $failed) = send_a('third', message_id => 'dup');
	is("$failed $out", '0 t', '2: after DROP INDEX CONCURRENTLY the same id is taken');
}

### 3. an index of another access method, then dropped concurrently
{
	$node->safe_psql('postgres', q{
		CREATE INDEX CONCURRENTLY sdi_props ON sbq.messages USING gin (application_properties)
	});
	my ($out, $failed) = $a->query(q{
		SELECT sbq_send('sdi', 'props'::text, application_properties => '{"k": "v"}') > 0
	});
	is("$failed $out", '0 t', '3: a send with a GIN index on the table');
	is($node->safe_psql('postgres', q{
		SET enable_seqscan = off;
		SELECT count(*) FROM sbq.messages WHERE application_properties @> '{"k": "v"}'
	}), '1', '3: its row is found through the GIN index');
	$node->safe_psql('postgres', 'DROP INDEX CONCURRENTLY sbq.sdi_props');
	$node->safe_psql('postgres', 'DROP INDEX CONCURRENTLY sbq.sdi_extra');
	($out, $failed) = send_a('last');
	is("$failed $out", '0 t', '3: sends go on after the indexes are dropped');
	all_indexes_hold("3: sbqueue's own indexes hold every row");
	is($node->safe_psql('postgres', qq{
		SELECT count(*) FROM sbq.messages WHERE queue_id = $qid
	}), '14', '3: fourteen messages stored');
}

### 4. partial indexes, left closed only where no row of the send goes
{
	$node->safe_psql('postgres', q{
		SELECT sbq_create_queue('sdi_s', requires_session => true);
		-- a DBA's: one reading a column every row has of its own, one a column a call sets
		CREATE INDEX CONCURRENTLY sdi_mid ON sbq.messages (sequence_number)
		 WHERE message_id IS NOT NULL;
		CREATE INDEX CONCURRENTLY sdi_subject ON sbq.messages (queue_id)
		 WHERE subject IS NOT NULL;
	});
	my $before = $node->safe_psql('postgres', 'SELECT max(sequence_number) FROM sbq.messages');
	my @sends = (
		q{SELECT sbq_send('sdi', 'plain'::text) > 0},
		q{SELECT sbq_send('sdi', 'sched'::text,
			scheduled_enqueue_time => clock_timestamp() + interval '1 hour') > 0},
		q{SELECT sbq_send('sdi', 'ttl'::text, time_to_live => interval '1 hour') > 0},
		q{SELECT sbq_send('sdi_s', 'session'::text, session_id => 's1') > 0},
		q{SELECT sbq_send('sdi', 'subject'::text, subject => 'x') > 0},
		q{SELECT count(*) = 3 FROM sbq_send_batch('sdi', ARRAY['b1', 'b2', 'b3']::text[],
			scheduled_enqueue_time => clock_timestamp() + interval '1 hour', subject => 'y')},
		q{SELECT count(*) = 2 FROM sbq_send_batch('sdi_s', ARRAY['b4', 'b5']::text[],
			session_id => 's2', time_to_live => interval '1 hour')},
		q{SELECT sbq_send('sdi', 'plain again'::text) > 0});
	for my $sql (@sends)
	{
		my ($out, $failed) = $a->query($sql);
		is("$failed $out", '0 t', "4: $sql");
	}
	all_indexes_hold('4: every partial index holds every row its predicate takes');
	is($node->safe_psql('postgres', qq{
		SELECT count(*) || ' ' || count(*) FILTER (WHERE state = 2) || ' ' ||
		       count(*) FILTER (WHERE expires_at IS NOT NULL) || ' ' ||
		       count(*) FILTER (WHERE session_id IS NOT NULL) || ' ' ||
		       count(*) FILTER (WHERE subject IS NOT NULL)
		  FROM sbq.messages WHERE sequence_number > $before
	}), '11 4 3 3 4', '4: the rows those indexes must hold were sent');
}

$a->quit;
$node->stop;
done_testing();
