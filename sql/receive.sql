-- receive and peek: order, limits, modes, waiting and rollback
\set VERBOSITY sqlstate
-- sequence numbers step by :step (1 on one server, 64 on a node of a distributed installation)
SELECT regress.step() AS step \gset

SELECT queue FROM sbq_create_queue('r');
SELECT min(seq) AS first FROM sbq_send_batch('r', ARRAY['m1', 'm2', 'm3', 'm4', 'm5']) AS seq \gset

-- receive hands out the lowest sequence numbers first, locked, counted
SELECT regress.dist(sequence_number, :first) AS n, convert_from(body, 'UTF8') AS body, delivery_count, state,
       lock_token IS NOT NULL AS has_token,
       locked_until BETWEEN now() + interval '29 seconds' AND clock_timestamp() + interval '30 seconds' AS locked_30s
  FROM sbq_receive('r', 2);
-- locked messages are hidden from other receives
SELECT regress.dist(sequence_number, :first) AS n, delivery_count FROM sbq_receive('r');
-- asking for more than there is returns what there is
SELECT regress.dist(sequence_number, :first) AS n FROM sbq_receive('r', 10);
SELECT count(*) AS nothing_left FROM sbq_receive('r', 10);

-- peek shows every message in order, locked or not, without token or count change
SELECT regress.dist(sequence_number, :first) AS n, delivery_count, lock_token, locked_until IS NOT NULL AS locked, state
  FROM sbq_peek('r', 10);
SELECT regress.dist(sequence_number, :first) AS n FROM sbq_peek('r', 2, :first + 3 * :step);
SELECT count(*) FROM sbq_peek('r', 10, :first + 100 * :step);
SELECT count(*) FROM sbq_peek('r/$deadletterqueue', 10);

-- receive_and_delete: removed as returned, no token, counted as a delivery
SELECT queue FROM sbq_create_queue('rd');
SELECT sbq_send('rd', 'gone') > 0 AS sent;
SELECT convert_from(body, 'UTF8') AS body, lock_token, locked_until, delivery_count
  FROM sbq_receive('rd', 5, receive_mode => 'receive_and_delete');
SELECT count(*) AS left_after FROM sbq_peek('rd', 10);

-- a receive whose transaction rolls back leaves no trace
SELECT sbq_send('rd', 'again') > 0 AS sent;
BEGIN;
SELECT delivery_count FROM sbq_receive('rd');
ROLLBACK;
SELECT delivery_count, locked_until IS NULL AS unlocked FROM sbq_peek('rd');
BEGIN;
SELECT delivery_count FROM sbq_receive('rd', receive_mode => 'receive_and_delete');
ROLLBACK;
SELECT delivery_count FROM sbq_receive('rd');

-- max_wait: returns at once when a message is there, and empty when none comes
SELECT sbq_send('rd', 'waiting') > 0 AS sent;
SELECT clock_timestamp() AS t0 \gset
SELECT convert_from(body, 'UTF8') AS body FROM sbq_receive('rd', 5, '5 seconds');
SELECT clock_timestamp() - :'t0'::timestamptz < interval '2 seconds' AS returned_at_once;
SELECT clock_timestamp() AS t0 \gset
SELECT count(*) FROM sbq_receive('rd', 1, '300 milliseconds');
SELECT clock_timestamp() - :'t0'::timestamptz >= interval '300 milliseconds' AS waited;

-- bad arguments: 22023 and 22004, nothing received
SELECT regress.err($$SELECT * FROM sbq_receive('r', 0)$$);
SELECT regress.err($$SELECT * FROM sbq_receive('r', 5001)$$);
SELECT regress.err($$SELECT * FROM sbq_receive('r', -1)$$);
SELECT regress.err($$SELECT * FROM sbq_receive('r', NULL)$$);
SELECT regress.err($$SELECT * FROM sbq_receive('r', 1, '-1 second')$$);
SELECT regress.err($$SELECT * FROM sbq_receive('r', 1, NULL)$$);
SELECT regress.err($$SELECT * FROM sbq_receive('r', 1, '0', 'PeekLock')$$);
SELECT regress.err($$SELECT * FROM sbq_receive('r', 1, '0', NULL)$$);
SELECT regress.err($$SELECT * FROM sbq_receive(NULL)$$);
SELECT regress.err($$SELECT * FROM sbq_receive('missing')$$);
SELECT regress.err($$SELECT * FROM sbq_receive('r/$deadletter')$$);
SELECT regress.err($$SELECT * FROM sbq_peek('r', 0)$$);
SELECT regress.err($$SELECT * FROM sbq_peek('r', 5001)$$);
SELECT regress.err($$SELECT * FROM sbq_peek('r', NULL)$$);
SELECT regress.err($$SELECT * FROM sbq_peek(NULL)$$);
SELECT regress.err($$SELECT * FROM sbq_peek('missing')$$);
SELECT count(*) AS still_locked FROM sbq_peek('r', 10) WHERE locked_until IS NOT NULL;

-- a receive writes: refused in a read-only transaction; peek works there
BEGIN READ ONLY;
SELECT regress.err($$SELECT * FROM sbq_receive('r')$$);
SELECT count(*) FROM sbq_peek('r', 10);
ROLLBACK;

SELECT sbq_delete_queue('r');
SELECT sbq_delete_queue('rd');
