# Copyright (c) 2026, the sbqueue authors
#
# Locks in shared memory (leases) against what a review of their lifecycle
# found:
#	1. a session whose transaction began before DROP and CREATE EXTENSION in
#	   another session must not lock a new message under the old incarnation
#	   (then another session would lock it too);
#	2. maintenance in a transaction that drops and creates the extension, and
#	   then rolls back, must not end the live incarnation's leases;
#	3. maintenance whose list of queues is older than a queue whose lease it
#	   finds expired must keep that lease's delivery count;
#	4. with sbqueue.memory_locks off, a resubmit can be prepared (two-phase
#	   commit) while another session's lease has expired;
#	5. maintenance under REPEATABLE READ frees the leftover lease of a deleted
#	   queue.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/../harness";
use SbqNode;
use Time::HiRes qw(usleep);

my $node = SbqNode::preloaded('lease_review', qq(
max_prepared_transactions = 2
));

sub fresh_db
{
	my ($db) = @_;
	$node->safe_psql('postgres', "CREATE DATABASE $db");
	$node->safe_psql($db, 'CREATE EXTENSION sbqueue');
}

### 1. a transaction older than DROP and CREATE EXTENSION
{
	fresh_db('stale');
	$node->safe_psql('stale', "SELECT sbq_create_queue('q')");
	my $s = $node->background_psql('stale');
	# warm this session's caches, then open a transaction
	$s->query_safe("SELECT count(*) FROM sbq_receive('q')");
	$s->query_safe('BEGIN');
	$s->query_safe('SELECT 1');
	$node->safe_psql('stale', q{
		DROP EXTENSION sbqueue;
		CREATE EXTENSION sbqueue;
		SELECT sbq_create_queue('q');
		SELECT sbq_send('q', 'm');
	});
	my $got_s = $s->query_safe("SELECT count(*) FROM sbq_receive('q')");
	my $got_r = $node->safe_psql('stale', "SELECT count(*) FROM sbq_receive('q')");
	is("$got_s $got_r", '1 0',
		'the older transaction locks the new message, and then nobody else can');
	$s->query_safe('COMMIT');
	$s->quit;
}

### 2. DROP and CREATE EXTENSION, maintenance, ROLLBACK
{
	fresh_db('orphan');
	$node->safe_psql('orphan', q{
		SELECT sbq_create_queue('q', lock_duration => '5 s');
		SELECT sbq_send('q', 'm1');
		SELECT count(*) FROM sbq_receive('q');
	});
	usleep(5_500_000);
	$node->safe_psql('orphan', q{
		BEGIN;
		DROP EXTENSION sbqueue;
		CREATE EXTENSION sbqueue;
		SELECT sbq_maintain();
		ROLLBACK;
	});
	is($node->safe_psql('orphan', q{SELECT delivery_count FROM sbq_receive('q')}), '2',
		'after the rolled-back drop, the next delivery still counts the expired one');
}

### 3. maintenance whose list of queues is older than the queue it meets
{
	fresh_db('late');
	# counts gathered in shared memory: maintenance stores them after it read
	# its list of queues and before its sweep, so a lock can hold it there
	$node->safe_psql('late', q{
		SELECT sbq_create_queue('q1');
		SELECT sbq_send('q1', 'x');
	});
	my $c = $node->background_psql('late');
	$c->query_safe(q{
		BEGIN;
		SELECT sbq_create_queue('q2', lock_duration => '5 s');
		SELECT sbq_send('q2', 'm');
		SELECT count(*) FROM sbq_receive('q2');
	});
	usleep(5_500_000);
	# hold maintenance between its list of queues and its sweep
	my $x = $node->background_psql('late');
	$x->query_safe('BEGIN; LOCK TABLE sbq.queue_counters IN EXCLUSIVE MODE');
	my $m = $node->background_psql('late');
	$m->query_until(qr/started/, q{\echo started
SELECT sbq_maintain() IS NOT NULL AS maintained;
});
	$node->poll_query_until('late',
		q{SELECT count(*) > 0 FROM pg_stat_activity WHERE wait_event_type = 'Lock'
		    AND query LIKE 'SELECT sbq_maintain()%'})
	  or diag('maintenance never waited');
	$c->query_safe('COMMIT');
	$x->query_safe('COMMIT');
	$m->query_safe('SELECT 1');
	is($node->safe_psql('late', q{SELECT delivery_count FROM sbq_receive('q2')}), '2',
		'a queue made after maintenance read its list keeps the count of its expired delivery');
	$_->quit for ($c, $x, $m);
}

### 4. two-phase commit of a resubmit with memory_locks off
{
	fresh_db('tpc');
	$node->safe_psql('tpc', q{
		SELECT sbq_create_queue('q', lock_duration => '5 s');
		SELECT sbq_send('q', 'dead');
		SELECT sbq_send('q', 'leased');
		SELECT sbq_deadletter('q', (SELECT lock_token FROM sbq_receive('q')));
		SELECT count(*) FROM sbq_receive('q');
	});
	usleep(5_500_000);
	my ($rc, $out, $err) = $node->psql('tpc', q{
		SET sbqueue.memory_locks = off;
		BEGIN;
		SELECT sbq_resubmit('q/$deadletterqueue');
		PREPARE TRANSACTION 'p_resubmit';
	});
	unlike($err, qr/ERROR/, 'memory_locks off: a resubmit can be prepared') or diag($err);
	$node->psql('tpc', "COMMIT PREPARED 'p_resubmit'");
	is($node->safe_psql('tpc', 'SELECT count(*) FROM pg_prepared_xacts'), '0',
		'nothing is left prepared');
}

### 5. REPEATABLE READ maintenance and a deleted queue's leftover lease
{
	fresh_db('rrleak');
	$node->safe_psql('rrleak', q{
		SELECT sbq_create_queue('q', lock_duration => '5 s');
		SELECT sbq_create_queue('other', lock_duration => '5 s');
		SELECT sbq_send('q', 'm');
	});
	# a receive that claims before the delete and commits after it
	my $l = $node->background_psql('rrleak');
	$l->query_safe('BEGIN');
	my $seq = $l->query_safe(q{SELECT sequence_number FROM sbq_receive('q')});
	$node->safe_psql('rrleak', "SELECT sbq_delete_queue('q')");
	$l->query_safe('COMMIT');
	$l->quit;
	is($node->safe_psql('rrleak', "SELECT sbq.lease_until($seq) IS NOT NULL"), 't',
		'the receive that committed after the delete left a lease');
	usleep(5_500_000);
	$node->safe_psql('rrleak', q{
		BEGIN ISOLATION LEVEL REPEATABLE READ;
		SELECT sbq_maintain();
		COMMIT;
	});
	is($node->safe_psql('rrleak', "SELECT sbq.lease_until($seq) IS NULL"), 't',
		'REPEATABLE READ maintenance ended the deleted queue\'s lease');
}

$node->stop;
done_testing();
