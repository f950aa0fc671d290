# Copyright (c) 2026, the sbqueue authors
#
# Edges of moving a queue's counters from shared memory into
# sbq.queue_counters (src/qstate.c, the move slots):
#	1. a prepared transaction that moved counts and is rolled back: the
#	   counters read what they read before, at once and while the queue
#	   stays idle (not low until the queue's next move);
#	2. a prepared transaction's counts: not counted while it is prepared,
#	   never once it is rolled back, from COMMIT PREPARED on once it commits
#	   (kept in the entry's slots for prepared transactions; with those
#	   full, counted at PREPARE as before), and stored once, not twice;
#	3. a transaction held open in another database does not stop this
#	   database's counts from being stored (it cannot read them);
#	4. a move slot whose transaction is older than the commit log that
#	   VACUUM kept (a queue idle while the server went on): the next send,
#	   receive and sbq_maintain() still work.
# Each part uses its own queue, so each stands on its own. SBQ_TEST_PORT, when
# set, is the port of the test's server.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('metrics_counters_move_edges',
	$ENV{SBQ_TEST_PORT} ? (port => $ENV{SBQ_TEST_PORT}) : ());
$node->init;
$node->append_conf('postgresql.conf', qq(
shared_preload_libraries = 'sbqueue'
sbqueue.enable_maintenance_worker = off
max_prepared_transactions = 4
));
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION sbqueue');

sub sent
{
	my ($q) = @_;
	return $node->safe_psql('postgres',
		"SELECT sent FROM sbq_queue_stats WHERE queue = '$q'");
}

# what sbq.queue_counters holds for queue $q (the rest is in shared memory)
sub stored
{
	my ($q) = @_;
	return $node->safe_psql('postgres', qq{
		SELECT coalesce(sum(c.sent), 0) FROM sbq.queue_counters c
		  JOIN sbq.queues q USING (queue_id) WHERE q.name = '$q'});
}

# a transaction that sends $n messages to 'psend' and is prepared as $gid
sub prepared_send
{
	my ($gid, $n) = @_;
	$node->safe_psql('postgres', qq{
		BEGIN;
		SELECT count(sbq_send('psend', 'x')) FROM generate_series(1, $n);
		PREPARE TRANSACTION '$gid';
	});
}

### 1. a prepared move rolled back
{
	$node->safe_psql('postgres', q{
		SELECT sbq_create_queue('tpc');
		SELECT count(sbq_send('tpc', 'x')) FROM generate_series(1, 5);
	});
	is(sent('tpc'), '5', 'tpc: five sent');
	$node->safe_psql('postgres', q{
		BEGIN;
		SELECT sbq_maintain();
		PREPARE TRANSACTION 'tpc_move';
	});
	is(sent('tpc'), '5', 'tpc: five while the move is prepared');
	$node->safe_psql('postgres', q{ROLLBACK PREPARED 'tpc_move'});
	is(sent('tpc'), '5', 'tpc: five once it is rolled back');
	$node->safe_psql('postgres', 'SELECT sbq_maintain()');
	is(sent('tpc'), '5', 'tpc: five after a maintenance pass of the idle queue');
	is(stored('tpc'), '5', 'tpc: and that pass stored them');
}

### 2. a prepared transaction's own counts
{
	$node->safe_psql('postgres', q{
		SELECT sbq_create_queue('psend');
		SELECT count(sbq_send('psend', 'x')) FROM generate_series(1, 2);
	});
	is(sent('psend'), '2', 'psend: two sent');
	prepared_send('psend_rb', 3);
	is(sent('psend'), '2', 'psend: a prepared send of three is not counted yet');
	$node->safe_psql('postgres', q{ROLLBACK PREPARED 'psend_rb'});
	is(sent('psend'), '2', 'psend: nor once it is rolled back');
	$node->safe_psql('postgres', 'SELECT sbq_maintain()');
	is(sent('psend'), '2', 'psend: nor after a maintenance pass');
	is(stored('psend'), '2', 'psend: which stored the two');

	$node->safe_psql('postgres', q{
		BEGIN;
		SELECT count(sbq_send('psend', 'x')) FROM generate_series(1, 4);
		SAVEPOINT s;
		SELECT sbq_send('psend', 'x');
		ROLLBACK TO s;
		PREPARE TRANSACTION 'psend_c';
	});
	is(sent('psend'), '2', 'psend: a prepared send of four is not counted yet');
	$node->safe_psql('postgres', 'SELECT sbq_maintain()');
	is(sent('psend'), '2', 'psend: nor after a maintenance pass meanwhile');
	$node->safe_psql('postgres', q{COMMIT PREPARED 'psend_c'});
	is(sent('psend'), '6', 'psend: it counts from its COMMIT PREPARED on');
	$node->safe_psql('postgres', 'SELECT sbq_maintain()');
	is(sent('psend'), '6', 'psend: six after a maintenance pass');
	is(stored('psend'), '6', 'psend: which stored them once');

	# three prepared at once: two slots, the third counted at its PREPARE
	prepared_send("psend_$_", $_) for 1 .. 3;
	is(sent('psend'), '9', 'psend: with the slots full, the third is counted at PREPARE');
	$node->safe_psql('postgres', q{COMMIT PREPARED 'psend_1'});
	is(sent('psend'), '10', 'psend: the first counts once committed');
	$node->safe_psql('postgres', q{ROLLBACK PREPARED 'psend_2'});
	$node->safe_psql('postgres', q{COMMIT PREPARED 'psend_3'});
	is(sent('psend'), '10', 'psend: the second rolled back, the third counted already');
	$node->safe_psql('postgres', 'SELECT sbq_maintain()');
	is(sent('psend'), '10', 'psend: ten after a maintenance pass');
	is(stored('psend'), '10', 'psend: which stored them once');
	is($node->safe_psql('postgres', q{
		SELECT sbq_send('psend', 'x') > 0;
		SELECT sent FROM sbq_queue_stats WHERE queue = 'psend'}), "t\n11",
		'psend: slots freed, a send counts at once');

	# two rolled back, no pass of maintenance: a reader frees their slots, so
	# two more prepared wait in them rather than count at PREPARE
	prepared_send("psend_$_", 1) for qw(a b);
	$node->safe_psql('postgres', qq{ROLLBACK PREPARED 'psend_$_'}) for qw(a b);
	is(sent('psend'), '11', 'psend: two rolled back, not counted');
	prepared_send("psend_$_", 1) for qw(c d);
	is(sent('psend'), '11', 'psend: the slots the reader freed hold two more prepared');
	$node->safe_psql('postgres', qq{ROLLBACK PREPARED 'psend_$_'}) for qw(c d);
	$node->safe_psql('postgres', 'SELECT sbq_maintain()');
	is(sent('psend'), '11', 'psend: eleven once they are rolled back too');

	# two committed, and no reader, pass or send that moves counts until two
	# more are prepared, within the second a send waits before it moves
	# them (a pass moved them just before): the two ended leave their slots
	# to them at PREPARE, so their rollback takes back what they sent
	# (before: no slot was free, both counted at PREPARE, and stayed counted)
	prepared_send("psend_$_", 1) for qw(e f);
	$node->safe_psql('postgres', q{SELECT sbq_send('psend', 'x'); SELECT sbq_maintain();});
	$node->safe_psql('postgres', qq{COMMIT PREPARED 'psend_$_'}) for qw(e f);
	prepared_send("psend_$_", 1) for qw(g h);
	$node->safe_psql('postgres', qq{ROLLBACK PREPARED 'psend_$_'}) for qw(g h);
	is(sent('psend'), '14', 'psend: two prepared after two ended, then rolled back, are not counted');
	$node->safe_psql('postgres', 'SELECT sbq_maintain()');
	is(sent('psend'), '14', 'psend: nor after a maintenance pass');
}

### 3. a transaction open in another database
{
	$node->safe_psql('postgres', q{
		CREATE DATABASE other;
		SELECT sbq_create_queue('far');
	});
	my $other = $node->background_psql('other', on_error_stop => 1);
	$other->query_safe(q{
		BEGIN ISOLATION LEVEL REPEATABLE READ;
		SELECT 1;
	});
	# a move a second: more moves than slots
	for my $i (1 .. 6)
	{
		$node->safe_psql('postgres', q{SELECT sbq_send('far', 'x')});
		sleep(1) if $i < 6;
		select(undef, undef, undef, 0.1);
	}
	$node->safe_psql('postgres', 'SELECT sbq_maintain()');
	is(sent('far'), '6', 'far: six sent');
	is(stored('far'), '6',
		'far: all six stored while another database holds a snapshot');
	$other->query_safe('COMMIT');
	$other->quit;
}

### 4. a move older than the commit log
{
	$node->safe_psql('postgres', q{
		SELECT sbq_create_queue('idle');
		SELECT sbq_send('idle', 'x');
	});
	sleep(1);
	select(undef, undef, undef, 0.2);
	# this send moves the first one's count: a slot with its transaction
	$node->safe_psql('postgres', q{SELECT sbq_send('idle', 'x')});
	is(stored('idle'), '1', 'idle: a count moved');

	# the server goes on for a commit log segment (2^20 transactions) and
	# VACUUM FREEZE of every database truncates the log before them
	$node->safe_psql('postgres', q{
		SET synchronous_commit = off;
		DO $$BEGIN
			FOR i IN 1 .. 1100000 LOOP PERFORM pg_current_xact_id(); COMMIT; END LOOP;
		END$$;
	});
	$node->safe_psql('postgres', 'ALTER DATABASE template0 ALLOW_CONNECTIONS true');
	$node->safe_psql($_, 'VACUUM (FREEZE)') for qw(template0 template1 other postgres);
	ok(!-e $node->data_dir . '/pg_xact/0000', 'idle: the first commit log segment is gone');

	my ($rc, $out, $err) = $node->psql('postgres', q{
		SELECT sbq_send('idle', 'x') > 0;
		SELECT sbq_maintain() IS NOT NULL;
		SELECT count(*) FROM sbq_receive('idle', 10, '0', 'receive_and_delete');
	});
	is($rc, 0, 'idle: send, maintenance and receive succeed') or diag($err);
	is(sent('idle'), '3', 'idle: three sent');
}

$node->stop;
done_testing();
