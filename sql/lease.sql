-- lease: message locks kept in shared memory (sbqueue preloaded, sbqueue.memory_locks on)
\set VERBOSITY sqlstate
-- sequence numbers step by :step (1 on one server, 64 on a node of a distributed installation)
SELECT regress.step() AS step \gset
SET sbqueue.memory_locks = on;
-- through a Citus coordinator: a SET LOCAL is sent to the node the call runs on
SET citus.propagate_set_commands = 'local';

SELECT queue FROM sbq_create_queue('ls', max_delivery_count => 3);
SELECT min(seq) AS first FROM sbq_send_batch('ls', ARRAY['m1', 'm2', 'm3']) AS seq \gset

-- a receive writes nothing: its transaction gets no transaction id (so its
-- commit waits for no WAL flush), and the row keeps no lock. The transaction id is
-- the one of the server that holds the queue's rows: a query of sbq.queues runs there
-- (through a coordinator, on the queue's node, in the transaction the call ran in)
BEGIN;
SELECT regress.dist(sequence_number, :first) AS n0, delivery_count AS count0, lock_token AS t0
  FROM sbq_receive('ls') \gset
SELECT :n0 AS n, :count0 AS delivery_count, txid_current_if_assigned() IS NULL AS no_xid
  FROM sbq.queues WHERE name = 'ls';
COMMIT;
-- (no regress function in a query of sbq.*: through a coordinator it runs on the node)
SELECT (sequence_number - :first) / :step AS n, delivery_count, lock_token IS NULL AS row_has_no_token,
       locked_until IS NULL AS row_not_locked
  FROM sbq.messages WHERE queue_id = (SELECT queue_id FROM sbq.queues WHERE name = 'ls')
 ORDER BY sequence_number;
-- peek and the stats see the lease
SELECT regress.dist(sequence_number, :first) AS n, delivery_count, locked_until IS NOT NULL AS locked FROM sbq_peek('ls', 10);
SELECT active_count, locked_count, received FROM sbq_queue_stats WHERE queue = 'ls';

-- the control: with the locks in the rows a receive writes, and so it has an xid
BEGIN;
SET LOCAL sbqueue.memory_locks = off;
SELECT regress.dist(sequence_number, :first) AS n, delivery_count FROM sbq_receive('ls');
SELECT txid_current_if_assigned() IS NOT NULL AS has_xid FROM sbq.queues WHERE name = 'ls';
ROLLBACK;

-- a receive rolled back to a savepoint leaves no lease behind
BEGIN;
SAVEPOINT s;
SELECT regress.dist(sequence_number, :first) AS n FROM sbq_receive('ls');
ROLLBACK TO SAVEPOINT s;
SELECT regress.dist(sequence_number, :first) AS n, delivery_count FROM sbq_receive('ls');
COMMIT;
SELECT regress.dist(sequence_number, :first) AS n, delivery_count, locked_until IS NOT NULL AS locked FROM sbq_peek('ls', 10);

-- settle in the transaction of the receive; abandon, then receive again in it
BEGIN;
SELECT lock_token AS t3 FROM sbq_receive('ls') \gset
SELECT sbq_abandon('ls', :'t3');
SELECT regress.dist(sequence_number, :first) AS n, delivery_count FROM sbq_receive('ls');
SELECT count(*) AS nothing_more FROM sbq_receive('ls');
ROLLBACK;
SELECT regress.dist(sequence_number, :first) AS n, delivery_count, locked_until IS NOT NULL AS locked FROM sbq_peek('ls', 10);

-- a renew that rolls back is undone; one that commits holds
SELECT lock_token AS t1 FROM sbq_receive('ls', 1, receive_mode => 'peek_lock') \gset
SELECT count(*) AS nothing_free FROM sbq_receive('ls');
SELECT locked_until AS u1 FROM sbq_peek('ls', 10) WHERE sequence_number = :first + 2 * :step \gset
BEGIN;
SELECT sbq_renew('ls', :'t1') > :'u1'::timestamptz AS renewed;
ROLLBACK;
SELECT locked_until = :'u1'::timestamptz AS renew_undone FROM sbq_peek('ls', 10) WHERE sequence_number = :first + 2 * :step;
SELECT sbq_renew('ls', :'t1') > :'u1'::timestamptz AS renewed;
SELECT locked_until > :'u1'::timestamptz AS renew_kept FROM sbq_peek('ls', 10) WHERE sequence_number = :first + 2 * :step;

-- complete and complete(uuid[]) end leases; a complete that rolls back keeps the lock
BEGIN;
SELECT sbq_complete('ls', :'t1'::uuid);
ROLLBACK;
SELECT regress.errc(format('SELECT sbq_renew(%L, %L::uuid)', 'ls', :'t1')) AS lock_still_valid;
SELECT sbq_complete('ls', :'t1'::uuid);
SELECT regress.errc(format('SELECT sbq_complete(%L, %L::uuid)', 'ls', :'t1')) AS second_complete;

-- a purge drops leased messages; their tokens are then lost (SB002)
SELECT regress.errc(format('SELECT sbq_renew(%L, %L::uuid)', 'ls', :'t0')) AS renew_before_purge;
SELECT sbq_purge_queue('ls') AS purged;
SELECT regress.errc(format('SELECT sbq_renew(%L, %L::uuid)', 'ls', :'t0')) AS renew_after_purge;
SELECT regress.errc(format('SELECT sbq_complete(%L, %L::uuid)', 'ls', :'t0')) AS complete_after_purge;

-- counters: every delivery under a lease is counted once, when it ends or while it lasts
SELECT sent, received, completed, abandoned FROM sbq_queue_stats WHERE queue = 'ls';

-- receive-and-delete and the durable paths skip leased messages
SELECT min(seq) AS f2 FROM sbq_send_batch('ls', ARRAY['n1', 'n2']) AS seq \gset
SELECT regress.dist(sequence_number, :f2) AS n FROM sbq_receive('ls');
SELECT regress.dist(sequence_number, :f2) AS n, convert_from(body, 'UTF8') AS body
  FROM sbq_receive('ls', 5, receive_mode => 'receive_and_delete');
SELECT regress.dist(sequence_number, :f2) AS n, locked_until IS NOT NULL AS locked FROM sbq_peek('ls', 10);

SELECT sbq_delete_queue('ls');

-- the head of a queue (qstate.c): a leasing receive starts its scan where the
-- queue's head was last seen; maintenance checks that head and lowers it to a
-- message that appeared below it by a path that announces nothing (here an
-- UPDATE by hand, as a restore would write)
SELECT queue FROM sbq_create_queue('lh');
SELECT sbq_send('lh', 'hidden') AS hidden \gset
SELECT regress.set_state('lh', :hidden, 1) AS hidden_by_hand;
SELECT sbq_send('lh', 'seen') AS seen \gset
SELECT convert_from(r.body, 'UTF8') AS completed
  FROM sbq_receive('lh') r, LATERAL sbq_complete('lh', r.lock_token) c;
SELECT count(*) AS nothing_left FROM sbq_receive('lh');
SELECT regress.set_state('lh', :hidden, 0) AS shown_by_hand;
SELECT count(*) AS skipped_below_the_head FROM sbq_receive('lh');
SELECT (sbq_maintain()) IS NOT NULL AS maintained;
SELECT convert_from(body, 'UTF8') AS found_after_the_check, delivery_count FROM sbq_receive('lh');
SELECT sbq_delete_queue('lh');
