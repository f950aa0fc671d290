# Copyright (c) 2026, the sbqueue authors
#
# Edges of locks kept in shared memory (leases) and of the queue state kept
# there:
#	1. maintenance under a REPEATABLE READ snapshot older than a queue does
#	   not end the expired leases of that queue without storing their
#	   delivery counts (it cannot see their rows): the next delivery reports
#	   2, and the queue's received counter says 2;
#	2. peek and sbq_queue_stats show a message as locked only once the
#	   receive that locked it has committed; meanwhile it is neither locked
#	   nor receivable there, and after a rollback it is receivable again as
#	   its first delivery;
#	3. DROP DATABASE ends the queue state in shared memory (the head of each
#	   queue, the counters not stored yet) of what it dropped: a database made
#	   again with the same OID from the same template starts afresh;
#	4. two-phase commit as documented: with sbqueue.memory_locks off, a
#	   transaction that receives (peek-lock) and completes a message locked in
#	   its row can be prepared, and so can sbq_maintain() while no lease of
#	   its database has expired; the prepared calls are counted once.
#	5. a session with sbqueue.memory_locks off ends an expired lease itself,
#	   with no maintenance, when its receive runs outside a transaction
#	   block (which cannot be prepared): the message is delivered again with
#	   the expired delivery counted. Inside a block it leaves the lease for
#	   maintenance, so that the transaction can still be prepared.
# Each part uses its own queues (parts 3 and 4 their own databases), so each
# stands on its own.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/../harness";
use SbqNode;
use SbqLease;
use Time::HiRes qw(usleep);

my $node = SbqNode::preloaded('lease_edges', qq(
max_prepared_transactions = 4
));
$node->safe_psql('postgres', 'CREATE EXTENSION sbqueue');

sub run_sql { return SbqLease::run_sql($node, @_); }

# The first message of queue $q as "body delivery_count", or '' for none.
sub receive_first
{
	my ($db, $q, $setup) = @_;
	$setup //= '';
	return $node->safe_psql($db, qq{
		$setup
		SELECT convert_from(body, 'UTF8') || ' ' || delivery_count FROM sbq_receive('$q')});
}

# The first message peek shows of queue $q as "body locked", locked being
# whether peek shows it under a valid lock; '' when it shows none.
sub peek_first
{
	my ($db, $q) = @_;
	return $node->safe_psql($db, qq{
		SELECT convert_from(body, 'UTF8') || ' '
			   || coalesce(locked_until > clock_timestamp(), false)
		  FROM sbq_peek('$q')});
}

# Columns @cols of sbq_queue_stats for queue $q, separated by spaces.
sub stats
{
	my ($db, $q, @cols) = @_;
	my $list = join(" || ' ' || ", @cols);
	return $node->safe_psql($db, "SELECT $list FROM sbq_queue_stats WHERE queue = '$q'");
}

### 1. maintenance under an old REPEATABLE READ snapshot
{
	my $old = $node->background_psql('postgres', on_error_stop => 0);
	$old->query_safe(q{
		BEGIN ISOLATION LEVEL REPEATABLE READ;
		SELECT 1 FROM sbq.queues LIMIT 1;
	});

	# the queue is created after that snapshot: it cannot see the queue
	$node->safe_psql('postgres', q{
		SELECT sbq_create_queue('rr', lock_duration => '5 s', max_delivery_count => 5);
		SELECT sbq_send('rr', 'seen-late');
	});
	is(receive_first('postgres', 'rr'), 'seen-late 1', 'rr: first delivery under a lease');
	usleep(5_500_000);

	my ($out, $failed) = $old->query('SELECT sbq_maintain() IS NOT NULL');
	is("$failed $out", '0 t',
		'rr: sbq_maintain() under a REPEATABLE READ snapshot older than the queue succeeds')
	  or diag($old->{stderr});
	$old->query('COMMIT');
	$old->quit;

	is(receive_first('postgres', 'rr'), 'seen-late 2',
		'rr: the next delivery reports 2 (the expired delivery was not forgotten)');
	is(stats('postgres', 'rr', 'received'), '2', 'rr: sbq_queue_stats counts 2 receives');
}

### 2. a receive that has not committed shows nothing
{
	$node->safe_psql('postgres', q{
		SELECT sbq_create_queue('p', lock_duration => '5 min');
		SELECT sbq_send('p', 'claimed');
		SELECT sbq_create_queue('p2', lock_duration => '5 min');
		SELECT sbq_send('p2', 'rolled-back');
	});

	for my $end ('COMMIT', 'ROLLBACK')
	{
		my $q = $end eq 'COMMIT' ? 'p' : 'p2';
		my $body = $end eq 'COMMIT' ? 'claimed' : 'rolled-back';
		my $a = $node->background_psql('postgres', on_error_stop => 0);
		$a->query_safe('BEGIN');
		is($a->query_safe("SELECT count(*) FROM sbq_receive('$q')"), '1',
			"$q: session A receives the message and does not commit");

		is(peek_first('postgres', $q), "$body false",
			"$q: before A ends, peek in B shows the message unlocked");
		is(stats('postgres', $q, 'locked_count', 'active_count'), '0 1',
			"$q: before A ends, sbq_queue_stats shows locked_count 0, active_count 1");
		is(receive_first('postgres', $q), '',
			"$q: before A ends, a receive in B gets nothing (the message is not receivable)");

		$a->query_safe($end);
		$a->quit;
		if ($end eq 'COMMIT')
		{
			is(peek_first('postgres', $q), "$body true",
				"$q: after A commits, peek shows the message locked");
			is(stats('postgres', $q, 'locked_count', 'active_count'), '1 0',
				"$q: after A commits, sbq_queue_stats shows locked_count 1, active_count 0");
		}
		else
		{
			is(peek_first('postgres', $q), "$body false",
				"$q: after A rolls back, peek shows the message unlocked");
			is(stats('postgres', $q, 'locked_count', 'active_count'), '0 1',
				"$q: after A rolls back, sbq_queue_stats shows locked_count 0, active_count 1");
			is(receive_first('postgres', $q), "$body 1",
				"$q: after A rolls back, B receives the message as its first delivery");
		}
	}
}

### 3. DROP DATABASE, then the same OID from the same template
{
	$node->safe_psql('postgres', 'CREATE DATABASE tmpl');
	$node->safe_psql('tmpl', q{
		CREATE EXTENSION sbqueue;
		SELECT sbq_create_queue('h', lock_duration => '5 min');
	});

	$node->safe_psql('postgres', 'CREATE DATABASE x TEMPLATE tmpl');
	my $oid = $node->safe_psql('postgres', "SELECT oid FROM pg_database WHERE datname = 'x'");
	# one session, so that the counts are still in shared memory when x goes
	$node->safe_psql('x', q{
		SELECT count(sbq_send('h', 'x' || g)) FROM generate_series(1, 30) g;
		CREATE TEMP TABLE r AS SELECT lock_token FROM sbq_receive('h', 20);
		SELECT sbq_complete('h', array_agg(lock_token)) FROM r;
	});
	is(receive_first('x', 'h'), 'x21 1', 'x: after 20 completed, the head of h is message 21');

	$node->safe_psql('postgres', 'DROP DATABASE x');
	$node->safe_psql('postgres', "CREATE DATABASE x2 OID = $oid TEMPLATE tmpl");
	is($node->safe_psql('postgres', "SELECT oid FROM pg_database WHERE datname = 'x2'"),
		$oid, 'x2: made from tmpl with the OID x had');
	$node->safe_psql('x2', "SELECT sbq_send('h', 'fresh')");
	is(receive_first('x2', 'h'), 'fresh 1', 'x2: the one message of h is received');

	my ($rc, $out, $err, $state) = run_sql('x2', 'SELECT sbq_maintain()');
	is($state, '', 'x2: sbq_maintain() succeeds') or diag($err);
	is(stats('x2', 'h', 'sent', 'received', 'completed'), '1 1 0',
		"x2: sbq_queue_stats of h counts x2's own calls only (sent 1, received 1, completed 0)");
}

### 4. two-phase commit with sbqueue.memory_locks off
# In a database of its own: no lease of the other parts can expire there, so
# maintenance has no lease to end (that would be a change to shared memory,
# which PREPARE TRANSACTION refuses whatever the setting).
{
	$node->safe_psql('postgres', 'CREATE DATABASE tpc');
	$node->safe_psql('tpc', q{
		CREATE EXTENSION sbqueue;
		SELECT sbq_create_queue('tpc', lock_duration => '5 min');
		SELECT sbq_send('tpc', 'row-locked');
		SELECT sbq_send('tpc', 'in-prepared');
	});
	my $token = $node->safe_psql('tpc', q{
		SET sbqueue.memory_locks = off;
		SELECT lock_token FROM sbq_receive('tpc')});
	like($token, qr/^[0-9a-f-]{36}$/, 'tpc: a message received with its lock in the row');

	my ($rc, $out, $err, $state) = run_sql('tpc', qq{
		SET sbqueue.memory_locks = off;
		BEGIN;
		SELECT convert_from(body, 'UTF8') || ' ' || delivery_count FROM sbq_receive('tpc');
		SELECT sbq_complete('tpc', '$token'::uuid);
		PREPARE TRANSACTION 'tpc_settle';
	});
	is($state, '', 'tpc: a peek-lock receive and a complete of a row-lock token can be prepared')
	  or diag($err);
	is($node->safe_psql('tpc', q{SELECT count(*) FROM pg_prepared_xacts WHERE gid = 'tpc_settle'}),
		'1', 'tpc: the transaction is prepared');
	$node->psql('tpc', "COMMIT PREPARED 'tpc_settle'");
	is(peek_first('tpc', 'tpc'), 'in-prepared true',
		'tpc: after COMMIT PREPARED, only the message it received is left, locked in its row');

	($rc, $out, $err, $state) = run_sql('tpc', q{
		SET sbqueue.memory_locks = off;
		BEGIN;
		SELECT sbq_maintain() IS NOT NULL;
		PREPARE TRANSACTION 'tpc_maintain';
	});
	is($state, '', 'tpc: sbq_maintain() with memory_locks off can be prepared') or diag($err);
	is($node->safe_psql('tpc', q{SELECT count(*) FROM pg_prepared_xacts WHERE gid = 'tpc_maintain'}),
		'1', 'tpc: the maintenance transaction is prepared');
	$node->psql('tpc', "COMMIT PREPARED 'tpc_maintain'");
	is($node->safe_psql('tpc', 'SELECT count(*) FROM pg_prepared_xacts'), '0',
		'tpc: no prepared transaction is left');
	is(stats('tpc', 'tpc', 'sent', 'received', 'completed'), '2 2 1',
		'tpc: sbq_queue_stats counts the prepared calls once (sent 2, received 2, completed 1)');
}

### 5. an expired lease and a session with sbqueue.memory_locks off
{
	$node->safe_psql('postgres', 'CREATE DATABASE mix');
	$node->safe_psql('mix', q{
		CREATE EXTENSION sbqueue;
		SELECT sbq_create_queue('mx', lock_duration => '5 s');
		SELECT sbq_send('mx', 'leased');
	});
	is(receive_first('mix', 'mx'), 'leased 1', 'mix: a receive takes a lease');
	usleep(5_500_000);

	my ($rc, $out, $err, $state) = run_sql('mix', q{
		SET sbqueue.memory_locks = off;
		BEGIN;
		SELECT count(*) FROM sbq_receive('mx');
		PREPARE TRANSACTION 'mix_block';
	});
	is($state, '', 'mix: inside a block, a receive beside the expired lease can be prepared')
	  or diag($err);
	is($out, '0', 'mix: ... and leaves that message to maintenance');
	$node->psql('mix', "ROLLBACK PREPARED 'mix_block'");

	is(receive_first('mix', 'mx', 'SET sbqueue.memory_locks = off;'), 'leased 2',
		'mix: outside a block, it ends the expired lease and delivers the message again');
	is(stats('mix', 'mx', 'locked_count', 'active_count', 'received'), '1 0 2',
		'mix: the message is locked (in its row), and both deliveries are counted');
}

$node->stop;
done_testing();
