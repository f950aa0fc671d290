# Copyright (c) 2026, the sbqueue authors
#
# Maintenance's look for expired locks stored in message rows (src/maintain.c,
# src/qstate.c): a queue whose rows a look read in full and found without a
# stored lock is marked in shared memory, and passes skip the look until a
# lock is written into a row (test/specs/maintain_row_locks.spec has the
# writers, and one still open while a pass looks).
#	1. a pass over a marked queue of 3,000 messages fetches a few rows, where
#	   the pass that marked it fetched every one; a receive that stores its
#	   lock in a row (sbqueue.memory_locks off) makes the next pass look again;
#	2. the marks are shared memory, lost at a restart: a lock stored in a row
#	   (an abandon's delay) before a restart still ends at the first pass after
#	   it, once it has expired, though the queue was marked before and a send
#	   made its entry again;
#	3. a queue with more active messages than the look reads (5,000) is never
#	   marked: a delay stored beyond them ends when the queue's head reaches it;
#	4. a receive that would store its locks in the rows and finds nothing takes
#	   no transaction id (it announces the locks it stored, none);
#	5. a pass in a transaction that ended a lock stored in a row (an abandon)
#	   sees it gone; prepared, then rolled back, the lock is back: the pass
#	   must not have marked the queue;
#	6. in one transaction, a pass finds no lock, then a lock is stored in a row
#	   without a call of sbqueue (a restore would do that), and a second pass
#	   finds it: the first pass's finding, due at commit, must not mark the
#	   queue then;
#	7. a look starts at the queue's head hint. A transaction that completed a
#	   message whose lock is stored in its row, then received the next (moving
#	   the hint past the first), is open while a pass looks from there and
#	   finds nothing; it rolls back, and the message is back with its lock:
#	   the hint's going down must undo the mark.
use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/../harness";
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use SbqNode;

my $node = SbqNode::preloaded('maintain_row_locks', "max_prepared_transactions = 2\n");
$node->safe_psql('postgres', 'CREATE EXTENSION sbqueue');

# the rows of sbq.messages a pass of sbq_maintain() fetched, and the locks it
# released: "fetched|released"
sub one_pass
{
	return $node->safe_psql('postgres', q{
		BEGIN;
		SELECT (sbq_maintain()->>'locks_released')::int AS released \gset
		SELECT coalesce(idx_tup_fetch, 0) || '|' || :released
		  FROM pg_stat_xact_user_tables WHERE relid = 'sbq.messages'::regclass;
		COMMIT;});
}

### 1. a marked queue is not read
$node->safe_psql('postgres', q{
	SELECT sbq_create_queue('marked');
	SELECT sbq_send_batch('marked', array_fill('m'::text, ARRAY[3000]));});
my ($fetched) = split /\|/, one_pass();
cmp_ok($fetched, '>=', 3000, 'the first pass reads every message of the queue');
($fetched) = split /\|/, one_pass();
cmp_ok($fetched, '<', 100, 'the next pass does not: the queue is marked');
$node->safe_psql('postgres', q{
	SET sbqueue.memory_locks = off;
	SELECT count(*) FROM sbq_receive('marked', 1);});
($fetched) = split /\|/, one_pass();
cmp_ok($fetched, '>=', 3000, 'a lock stored in a row: the pass after it reads the queue again');

### 2. a restart drops the marks
$node->safe_psql('postgres', q{
	SELECT sbq_create_queue('restart', lock_duration => interval '5 seconds');
	SELECT sbq_send('restart', 'held back');});
one_pass();
$node->safe_psql('postgres', q{
	SELECT sbq_abandon('restart', lock_token, delay => interval '2 seconds')
	  FROM sbq_receive('restart', 1);});
$node->restart;
# a send makes the queue's entry again, with no mark
$node->safe_psql('postgres', q{SELECT sbq_send('restart', 'after the restart')});
$node->safe_psql('postgres', q{SELECT pg_sleep(2.2)});
my (undef, $released) = split /\|/, one_pass();
is($released, 1, 'after a restart, the first pass ends the delay stored before it');

### 3. a queue deeper than the look is never marked
$node->safe_psql('postgres', q{
	SELECT sbq_create_queue('deep', lock_duration => interval '30 seconds');
	SELECT sbq_send_batch('deep', array_fill('m'::text, ARRAY[5000]));
	SELECT sbq_send('deep', 'last');
	CREATE TABLE deep_tok AS SELECT sequence_number, lock_token FROM sbq_receive('deep', 5000);
	INSERT INTO deep_tok SELECT sequence_number, lock_token FROM sbq_receive('deep', 1);});
# the last one, past what the look reads, waits 4 s; the others are back at once
$node->safe_psql('postgres', q{
	SELECT sbq_abandon('deep', lock_token, delay => interval '4 seconds')
	  FROM deep_tok WHERE sequence_number = (SELECT max(sequence_number) FROM deep_tok);
	SELECT sbq_abandon('deep', array_agg(lock_token))
	  FROM deep_tok WHERE sequence_number < (SELECT max(sequence_number) FROM deep_tok);});
one_pass();
is( $node->safe_psql('postgres', q{
		SELECT count(*) FROM (SELECT sbq_complete('deep', lock_token)
		                        FROM sbq_receive('deep', 5000)) c}),
	'5000', 'the 5,000 messages ahead of the one held back are completed');
$node->safe_psql('postgres', q{
	SELECT pg_sleep(greatest(0, extract(epoch FROM locked_until - clock_timestamp())) + 0.2)
	  FROM sbq_peek('deep', 1);});
(undef, $released) = split /\|/, one_pass();
is($released, 1, 'the delay stored past the look ends at the pass after it expired');

### 4. an empty receive stays read-only
$node->safe_psql('postgres', q{SELECT sbq_create_queue('empty')});
is( $node->safe_psql('postgres', q{
		BEGIN;
		SET LOCAL sbqueue.memory_locks = off;
		SELECT count(*) FROM sbq_receive('empty', 10);
		SELECT pg_current_xact_id_if_assigned() IS NULL;
		COMMIT;}),
	"0\nt", 'a receive that finds nothing takes no transaction id');

### 5. a pass in a transaction prepared, then rolled back
$node->safe_psql('postgres', q{
	SELECT sbq_create_queue('prepared', lock_duration => interval '5 seconds');
	SELECT sbq_send('prepared', 'm');
	SET sbqueue.memory_locks = off;
	CREATE TABLE prepared_tok AS SELECT lock_token FROM sbq_receive('prepared', 1);});
$node->safe_psql('postgres', q{
	SET sbqueue.memory_locks = off;
	BEGIN;
	SELECT sbq_abandon('prepared', lock_token) FROM prepared_tok;
	SELECT sbq_maintain();
	PREPARE TRANSACTION 'pass';
	ROLLBACK PREPARED 'pass';});
$node->safe_psql('postgres', q{
	SELECT pg_sleep(greatest(0, extract(epoch FROM locked_until - clock_timestamp())) + 0.2)
	  FROM sbq_peek('prepared', 1);});
(undef, $released) = split /\|/, one_pass();
is($released, 1, 'the lock a prepared pass saw ended, back after ROLLBACK PREPARED, ends at its expiry');

### 6. a pass that found none, then one that found a lock, in one transaction
$node->safe_psql('postgres', q{
	SELECT sbq_create_queue('unannounced');
	SELECT sbq_send('unannounced', 'm');
	BEGIN;
	SELECT pg_current_xact_id() IS NOT NULL;
	SELECT sbq_maintain();
	UPDATE sbq.messages SET locked_until = clock_timestamp() + interval '1 second'
	 WHERE queue_id = (SELECT queue_id FROM sbq.queues WHERE name = 'unannounced');
	SELECT sbq_maintain();
	COMMIT;
	SELECT pg_sleep(1.2);});
(undef, $released) = split /\|/, one_pass();
is($released, 1, 'a lock a later pass of the same transaction found ends at its expiry');

### 7. a look from a head hint that a rollback then lowers
$node->safe_psql('postgres', q{
	SELECT sbq_create_queue('floor', lock_duration => interval '5 seconds');
	SELECT sbq_send('floor', 'first');
	SELECT sbq_send('floor', 'second');
	SET sbqueue.memory_locks = off;
	CREATE TABLE floor_tok AS SELECT lock_token FROM sbq_receive('floor', 1);});
one_pass();
my $t = $node->background_psql('postgres', on_error_stop => 0);
$t->query_safe('BEGIN');
$t->query_safe(q{SELECT sbq_complete('floor', lock_token) FROM floor_tok});
is($t->query_safe(q{SELECT convert_from(body, 'UTF8') FROM sbq_receive('floor', 1)}),
	'second', 'an open transaction completed the first message and received the second');
one_pass();
$t->query_safe('ROLLBACK');
$t->quit;
$node->safe_psql('postgres', q{
	SELECT pg_sleep(greatest(0, extract(epoch FROM locked_until - clock_timestamp())) + 0.2)
	  FROM sbq_peek('floor', 1);});
(undef, $released) = split /\|/, one_pass();
is($released, 1, 'the lock of the message back below the head hint ends at its expiry');

$node->stop;
done_testing();
