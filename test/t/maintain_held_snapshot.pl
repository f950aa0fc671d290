# Copyright (c) 2026, the sbqueue authors
#
# A maintenance pass under a transaction held open elsewhere does not read
# the completed messages that transaction keeps (src/maintain.c).
#
# Its look for the queues that have messages, and its look for expired locks
# at the head of each queue, started at the queue's first row: with a
# REPEATABLE READ transaction held open, every message completed since it
# began stays in the table and in the receive index, and every pass (once a
# second with the worker on) read them all again. Both now start at the
# queue's head hint (src/qstate.c), as a receive's scan does, except for the
# pass that checks the hint (once a minute), which looks below it.
#	1. 20,000 messages received and deleted under a held transaction: a pass
#	   after the one that checks the hint reads a few pages of sbq.messages,
#	   not the thousands the kept rows are on;
#	2. it still finds the queue's messages: an expired row lock at the head
#	   is released by that pass;
#	3. a message stored below the hint by a path that does not announce its
#	   sends (an INSERT by hand), in a queue that has no other: the passes
#	   before the next check do not see it (nor does a receive), the check a
#	   minute later finds it, and the receive after it gets it.
use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/../harness";
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use SbqNode;

my $node = SbqNode::preloaded('maintain_held_snapshot');
$node->safe_psql('postgres', q{
	CREATE EXTENSION sbqueue;
	SELECT sbq_create_queue('mh', lock_duration => '5 s');
	SELECT count(*) FROM (SELECT sbq_send_batch('mh', array_fill('kept'::text, ARRAY[5000]))
	                        FROM generate_series(1, 4)) s;
	SELECT count(*) FROM sbq_send_batch('mh', array_fill('live'::text, ARRAY[50]));
});

# the held transaction sees the 20,050 messages
my $held = $node->background_psql('postgres', on_error_stop => 0);
$held->set_query_timer_restart;    # it is held idle for over a minute
$held->query_safe(q{
	BEGIN ISOLATION LEVEL REPEATABLE READ;
	SELECT count(*) FROM sbq.messages;
});

# the first 20,000 taken out under it (they stay, for the held transaction)
for (1 .. 4)
{
	$node->safe_psql('postgres',
		q{SELECT count(*) FROM sbq_receive('mh', 5000, receive_mode => 'receive_and_delete')});
}
# a peek-lock receive moves the head hint to the first live message, and its
# lock (in the row: memory locks off for it) expires after 5 seconds (the shortest)
is($node->safe_psql('postgres', q{
	SET sbqueue.memory_locks = off;
	SELECT convert_from(body, 'UTF8') FROM sbq_receive('mh');
}), 'live', 'a live message received, its lock in the row');
is($node->safe_psql('postgres', q{
	SELECT convert_from(r.body, 'UTF8') FROM sbq_receive('mh') r,
	       LATERAL (SELECT sbq_complete('mh', r.lock_token)) c}),
	'live', 'another, under a lease, completed: the head hint moves past the kept rows');

# pages of sbq.messages a statement read (its backend's counts, flushed at exit)
sub pages_read
{
	my ($sql) = @_;
	my $before = $node->safe_psql('postgres', q{
		SELECT heap_blks_hit + heap_blks_read FROM pg_statio_user_tables
		 WHERE relid = 'sbq.messages'::regclass});
	my $out = $node->safe_psql('postgres', $sql);
	my $after = $node->safe_psql('postgres', q{
		SELECT heap_blks_hit + heap_blks_read FROM pg_statio_user_tables
		 WHERE relid = 'sbq.messages'::regclass});
	return ($after - $before, $out);
}

### 1. a pass after the hint's check reads a few pages
# the first pass checks the hint (below it: the kept rows, and nothing live)
my ($first) = pages_read('SELECT sbq_maintain() IS NOT NULL');
sleep(6);
my ($pages, $out) = pages_read(q{SELECT (sbq_maintain())->>'locks_released'});
note("pages read: first pass $first, next pass $pages");
cmp_ok($first, '>', 1000, '1: the pass that checks the hint reads below it (the kept rows)');
cmp_ok($pages, '<', 200, '1: the next pass reads a few pages, not the kept rows');

### 2. it still sees the queue's messages
is($out, '1', '2: that pass released the expired row lock at the head');
is($node->safe_psql('postgres', q{
	SELECT active_count || ' ' || locked_count FROM sbq_queue_stats WHERE queue = 'mh'}),
	'49 0', '2: 49 active (the one released among them), none locked');

$held->query_safe('COMMIT');
$held->quit;

### 3. a row below the hint, stored by hand, in a queue with no other message
$node->safe_psql('postgres', q{
	SELECT sbq_create_queue('mb');
	SELECT count(*) FROM sbq_send_batch('mb', array_fill('gone'::text, ARRAY[10]));
	SELECT count(sbq_complete('mb', lock_token)) FROM sbq_receive('mb', 10);
	SELECT sbq_maintain();
	INSERT INTO sbq.messages (sequence_number, queue_id, subqueue, state, delivery_count,
	                          enqueued_time, message_id, body)
	SELECT 0, queue_id, 0, 0, 0, now(), 'by-hand', '\x68616e64'::bytea
	  FROM sbq.queues WHERE name = 'mb';
	SELECT sbq_maintain();
});
is($node->safe_psql('postgres', q{SELECT count(*) FROM sbq_receive('mb')}), '0',
	'3: the row below the hint is not received before the check');
# the check comes a minute after the last
sleep(61);
$node->safe_psql('postgres', 'SELECT sbq_maintain()');
is($node->safe_psql('postgres', q{SELECT convert_from(body, 'UTF8') FROM sbq_receive('mb')}),
	'hand', '3: after the check a minute later, it is received');

$node->stop;
done_testing();
