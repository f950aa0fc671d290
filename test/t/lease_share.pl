# Copyright (c) 2026, the sbqueue authors
#
# The lease table is shared by every database, so no database may take it
# all, and nothing depends on finding room in it:
#	- a database takes at most sbqueue.max_locks_per_database leases; a
#	  receive that finds its share full stores the rest of its locks in the
#	  rows instead of failing, and the other databases still get leases;
#	- the internal functions behind the table (sbq.lease_slot, sbq.lease_free)
#	  refuse an application role, even one granted EXECUTE on everything in
#	  schema sbq as README says, so it cannot hold the table's slots;
#	- with sbqueue.memory_locks off, receives and maintenance work while the
#	  table is full;
#	- maintenance ends the expired leases of a database whose share, and the
#	  whole table, are full;
#	- with sbqueue.memory_locks off, receives (peek-lock and
#	  receive-and-delete) can be prepared (two-phase commit); a receive under
#	  a lease cannot, as documented.
# Each part starts from a restart (an empty lease table) and uses its own
# queues, so each stands on its own.
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

# the smallest table 0.3 accepted, and the default share: a quarter of it
my $max_locks = 1024;
my $share = 256;
my @dbs = ('d1', 'd2', 'd3', 'd4');

my $node = SbqNode::preloaded('lease_share', qq(
sbqueue.max_locks = $max_locks
max_prepared_transactions = 2
));

is($node->safe_psql('postgres', 'SHOW sbqueue.max_locks'), $max_locks,
	"the lease table holds $max_locks locks");
is($node->safe_psql('postgres',
		"SELECT current_setting('sbqueue.max_locks_per_database', true)"),
	'-1', "a database's share is the default: a quarter of the table");

for my $db (@dbs)
{
	$node->safe_psql('postgres', "CREATE DATABASE $db");
	$node->safe_psql($db, 'CREATE EXTENSION sbqueue');
}

sub run_sql { return SbqLease::run_sql($node, @_); }

sub receive_many { return SbqLease::receive_many($node, @_); }

# How many messages of $q peek shows under a valid lock, of either kind.
sub locked_count
{
	my ($db, $q) = @_;
	return $node->safe_psql($db,
		"SELECT count(*) FROM sbq_peek('$q', 5000) WHERE locked_until > clock_timestamp()");
}

sub new_queue
{
	my ($db, $q, $n, $props) = @_;
	$props //= "lock_duration => '5 min'";
	$node->safe_psql($db, qq{
		SELECT sbq_create_queue('$q', $props);
		SELECT count(sbq_send('$q', 'm' || g)) FROM generate_series(1, $n) g;
	});
}

# Fill $db's share: receive $n > $share messages of a new queue $q under
# leases; the share takes $share of them, the rest are row locks.
sub fill_share
{
	my ($db, $q, $n, $props) = @_;
	new_queue($db, $q, $n, $props);
	my $r = receive_many($db, $q, $n);
	is("$r->{sqlstate} $r->{received} $r->{leased}", " $n $share",
		"$db: a receive of $n on '$q' gets $n messages, $share of them leases (its share is full)")
	  or diag($r->{err});
	return $r;
}

### 1. a full share degrades to locks stored in the rows
{
	$node->restart;
	new_queue('d1', 'big', 700);
	my $r = receive_many('d1', 'big', 700);
	is($r->{sqlstate}, '', 'd1: one receive of 700 does not fail') or diag($r->{err});
	is($r->{received}, 700, 'd1: it returns 700 messages');
	cmp_ok($r->{leased}, '<=', $share, "d1: at most $share of them are leases");
	is($r->{leased} + $r->{rowlocked}, 700, 'd1: the others are locks stored in the rows');
	is(locked_count('d1', 'big'), 700, 'd1: peek shows all 700 locked');
	for my $db ('d2', 'd3', 'd4')
	{
		new_queue($db, 'small', 50);
		$r = receive_many($db, 'small', 50);
		is("$r->{sqlstate} $r->{received} $r->{leased}", ' 50 50',
			"$db: a receive of 50 gets 50 leases while d1's share is full")
		  or diag($r->{err});
	}
}

### 2. an application role cannot take the table's slots
{
	$node->restart;
	$node->safe_psql('postgres', 'CREATE ROLE app LOGIN');
	$node->safe_psql('d1', q{
		GRANT USAGE ON SCHEMA sbq TO app;
		GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA sbq TO app;
		GRANT USAGE ON ALL SEQUENCES IN SCHEMA sbq TO app;
		GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA sbq TO app;
	});
	my @as_app = (extra_params => ['-U', 'app']);
	my ($rc, $out, $err, $state) = run_sql('d1', q{
		BEGIN;
		SELECT count(*) FROM (SELECT sbq.lease_slot(g) FROM generate_series(1, 100000) g) s;
	}, @as_app);
	is($state, '42501', 'app: sbq.lease_slot() is refused with 42501') or diag($err);
	($rc, $out, $err, $state) = run_sql('d1',
		q{SELECT sbq.lease_free(1, now(), '0'::xid, NULL)}, @as_app);
	is($state, '42501', 'app: sbq.lease_free() is refused with 42501') or diag($err);

	# app grabs every slot it can get and keeps its transaction open
	my $hostile = $node->background_psql('d1', on_error_stop => 0, @as_app);
	$hostile->query_safe(q{
		BEGIN;
		DO $$
		DECLARE
			n int := 0;
			st text := '';
		BEGIN
			FOR g IN 1 .. 100000 LOOP
				BEGIN
					PERFORM sbq.lease_slot(g);
					n := n + 1;
				EXCEPTION WHEN OTHERS THEN
					st := SQLSTATE;
					EXIT;
				END;
			END LOOP;
			PERFORM set_config('sbq_test.grabbed', n || ' ' || st, true);
		END $$;
	});
	my $grabbed = $hostile->query_safe("SELECT current_setting('sbq_test.grabbed')");
	is($grabbed, '0 42501', 'app: not one slot taken, the first call refused with 42501');
	new_queue('d2', 'victim', 50);
	my $r = receive_many('d2', 'victim', 50);
	is("$r->{sqlstate} $r->{received} $r->{leased}", ' 50 50',
		'd2: while app holds its transaction open, a receive of 50 gets 50 leases')
	  or diag($r->{err});
	$hostile->query_safe('ROLLBACK');
	$hostile->quit;
}

### 3. with sbqueue.memory_locks off, a full table changes nothing
{
	$node->restart;
	my $leases = 0;
	$leases += fill_share($_, 'full', 300)->{leased} for @dbs;
	is($leases, $max_locks, "the whole table is full: $max_locks leases in d1 to d4");
	new_queue('d2', 'off', 20);
	new_queue('d2', 'ttl', 5);
	$node->safe_psql('d2', q{
		SELECT count(sbq_send('ttl', 'short-lived', time_to_live => '1 second'))
		  FROM generate_series(1, 5)});
	my $r = receive_many('d2', 'off', 20, 'SET sbqueue.memory_locks = off;');
	is($r->{sqlstate}, '', 'memory_locks off: a receive in d2 does not fail') or diag($r->{err});
	is("$r->{received} $r->{rowlocked}", '20 20',
		'memory_locks off: all 20 received, with locks stored in the rows');
	usleep(1_200_000);
	my ($rc, $out, $err, $state) = run_sql('d2', q{
		SET sbqueue.memory_locks = off;
		SELECT sbq_maintain();
	});
	is($state, '', 'memory_locks off: sbq_maintain() in d2 succeeds') or diag($err);
	is($node->safe_psql('d2', q{SELECT count(*) FROM sbq.messages m
		  JOIN sbq.queues q USING (queue_id) WHERE q.name = 'ttl' AND m.subqueue = 0}),
		'5', 'memory_locks off: of the queue with expiring messages, only the 5 lasting ones are left');
}

### 4. maintenance ends expired leases while the whole table is full
{
	$node->restart;
	fill_share('d1', 'short', 300, "lock_duration => '5 s'");
	fill_share($_, 'long', 300) for ('d2', 'd3', 'd4');
	# messages whose time to live runs out: maintenance has rows to move too
	new_queue('d1', 'ttl', 0);
	$node->safe_psql('d1', q{
		SELECT count(sbq_send('ttl', 'short-lived', time_to_live => '1 second'))
		  FROM generate_series(1, 5)});
	usleep(5_500_000);
	my ($rc, $out, $err, $state) = run_sql('d1', 'SELECT sbq_maintain()');
	is($state, '', 'd1: sbq_maintain() with the table full and its leases expired succeeds')
	  or diag($err);
	is($node->safe_psql('d1', q{SELECT count(*) FROM sbq_peek('ttl', 10)}), '0',
		'd1: and it dropped the messages whose time to live ran out');
	new_queue('d1', 'after', 50);
	my $r = receive_many('d1', 'after', 50);
	is("$r->{sqlstate} $r->{received} $r->{leased}", ' 50 50',
		'd1: after maintenance, a receive of 50 gets 50 leases')
	  or diag($r->{err});
}

### 5. two-phase commit (each case on its own queue)
{
	$node->restart;
	my ($rc, $out, $err, $state);

	# a peek-lock receive with locks in the rows, prepared
	new_queue('d1', 'tpc_lock', 2);
	($rc, $out, $err, $state) = run_sql('d1', q{
		SET sbqueue.memory_locks = off;
		BEGIN;
		SELECT lock_token FROM sbq_receive('tpc_lock');
		PREPARE TRANSACTION 'p_lock';
	});
	is($state, '', 'memory_locks off: a peek-lock receive can be prepared') or diag($err);
	my $token = $out;
	($rc, $out, $err) = $node->psql('d1', "COMMIT PREPARED 'p_lock'");
	($rc, $out, $err, $state) = run_sql('d1', "SELECT sbq_complete('tpc_lock', '$token'::uuid)");
	is("$rc $state", '0 ', 'after COMMIT PREPARED, its lock token completes the message')
	  or diag($err);

	# a receive_and_delete receive, prepared
	new_queue('d1', 'tpc_delete', 2);
	($rc, $out, $err, $state) = run_sql('d1', q{
		SET sbqueue.memory_locks = off;
		BEGIN;
		SELECT convert_from(body, 'UTF8') || ' ' || delivery_count
		  FROM sbq_receive('tpc_delete', 1, receive_mode => 'receive_and_delete');
		PREPARE TRANSACTION 'p_delete';
	});
	is($state, '', 'memory_locks off: a receive_and_delete receive can be prepared')
	  or diag($err);
	($rc, $out, $err) = $node->psql('d1', "COMMIT PREPARED 'p_delete'");
	is($node->safe_psql('d1',
			q{SELECT string_agg(convert_from(body, 'UTF8'), ',') FROM sbq_peek('tpc_delete', 10)}),
		'm2', 'after COMMIT PREPARED, the message it received is gone, the other is there');
	is($node->safe_psql('d1', 'SELECT count(*) FROM pg_prepared_xacts'), '0',
		'no prepared transaction is left');

	# a receive under a lease: refused, as documented
	new_queue('d1', 'tpc_refused', 1);
	($rc, $out, $err, $state) = run_sql('d1', q{
		BEGIN;
		SELECT count(*) FROM sbq_receive('tpc_refused');
		PREPARE TRANSACTION 'p_refused';
	});
	is($state, '0A000', 'under a lease: PREPARE TRANSACTION is refused with 0A000');
	like($err, qr/set "sbqueue\.memory_locks" to off/, 'the refusal says what to do');
	is($node->safe_psql('d1', 'SELECT count(*) FROM pg_prepared_xacts'), '0',
		'nothing was prepared');
	is($node->safe_psql('d1',
			q{SELECT convert_from(body, 'UTF8') || ' ' || delivery_count FROM sbq_receive('tpc_refused')}),
		'm1 1', 'the refused receive left no trace: the message comes at once, first delivery');
}

$node->stop;
done_testing();
