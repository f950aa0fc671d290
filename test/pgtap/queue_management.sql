-- sbqueue pgTAP: create, get, update, purge, delete, names, views (no sleeps)
BEGIN;
SELECT plan(57);

-- ------------------------------------------------------------ create defaults
CREATE TEMP TABLE c AS SELECT * FROM sbq_create_queue('t07_Orders');
SELECT is((SELECT lock_duration FROM c), interval '30 seconds',
    'R2.1 (API default): lock_duration defaults to 30 s');
SELECT is((SELECT max_delivery_count FROM c), 10,
    'R3.7: max_delivery_count defaults to 10');
SELECT is((SELECT max_message_size FROM c), 1048576,
    'R5.1 (API default): max_message_size defaults to 1048576');
SELECT ok((SELECT default_message_ttl IS NULL AND duplicate_detection_window IS NULL
                  AND dead_lettering_on_message_expiration = false AND requires_session = false
                  AND forward_to IS NULL AND forward_dead_lettered_messages_to IS NULL FROM c),
    '§6 (API defaults): no TTL, no duplicate detection, no expiry dead-lettering, no sessions, no forwarding');
SELECT is((SELECT lower(queue) FROM c), 't07_orders',
    'R6.3: create returns the queue name');
SELECT is((SELECT g::text FROM sbq_get_queue('T07_ORDERS') g), (SELECT c::text FROM c),
    'R6.3: get_queue in another letter case returns the created properties');
SELECT is((SELECT max_delivery_count FROM sbq_queues WHERE lower(queue) = 't07_orders'), 10,
    'R6.3 (API): the sbq_queues view has the new queue');

SELECT throws_ok($$SELECT sbq_create_queue('t07_Orders')$$, 'SB006', NULL,
    'R6.3: creating the same name again fails with SB006');
SELECT throws_ok($$SELECT sbq_create_queue('T07_ORDERS')$$, 'SB006', NULL,
    'R6.3: creating the name in upper case fails with SB006 (names compare case-insensitively)');
SELECT throws_ok($$SELECT sbq_create_queue('t07_orders')$$, 'SB006', NULL,
    'R6.3: creating the name in lower case fails with SB006');
SELECT is((SELECT count(*) FROM sbq_queues WHERE lower(queue) = 't07_orders'), 1::bigint,
    'R6.3: the failed creates left one queue');

CREATE TEMP TABLE s AS SELECT sbq_send('T07_ORDERS', 'hi'::text) AS seq;
SELECT is((SELECT sequence_number FROM sbq_peek('t07_orders')), (SELECT seq FROM s),
    'R6.3: a send to the name in another letter case reaches the queue');

-- ------------------------------------------------------------ update
CREATE TEMP TABLE u1 AS SELECT * FROM sbq_update_queue('t07_orders', max_delivery_count => 5);
SELECT is((SELECT max_delivery_count FROM u1), 5,
    'R3.7 (API update): update sets max_delivery_count');
SELECT is((SELECT lock_duration FROM u1), interval '30 seconds',
    'R2.1 (API update): a NULL lock_duration leaves it as it is');
SELECT is((SELECT max_message_size FROM u1), 1048576,
    'R5.1 (API update): a NULL max_message_size leaves it as it is');
CREATE TEMP TABLE u2 AS SELECT * FROM sbq_update_queue('t07_orders', lock_duration => '1 minute');
SELECT is((SELECT lock_duration FROM u2), interval '1 minute',
    'R2.1 (API update): update sets lock_duration');
SELECT is((SELECT max_delivery_count FROM u2), 5,
    'R3.7 (API update): the earlier update of max_delivery_count is kept');
SELECT is((SELECT lock_duration::text || '/' || max_delivery_count FROM sbq_get_queue('t07_orders')),
          (SELECT lock_duration::text || '/' || max_delivery_count FROM u2),
    'R2.1, R3.7: get_queue shows the updated properties');
SELECT is((SELECT created_at FROM u2), (SELECT created_at FROM c),
    '§6 (API): update keeps created_at');
CREATE TEMP TABLE r AS SELECT * FROM sbq_receive('t07_orders');
SELECT ok((SELECT locked_until BETWEEN clock_timestamp() + interval '58 seconds'
                                   AND clock_timestamp() + interval '61 seconds' FROM r),
    'R2.1: a receive after the update locks for the new lock_duration (1 min)');
SELECT throws_ok($$SELECT sbq_update_queue('t07_orders', lock_duration => '4 seconds')$$, '22023', NULL,
    'R2.2: update with lock_duration 4 s fails with 22023');
SELECT is((SELECT lock_duration FROM sbq_get_queue('t07_orders')), interval '1 minute',
    'R2.2: the failed update changed nothing');
SELECT throws_ok($$SELECT sbq_update_queue('t07_nosuch', max_delivery_count => 3)$$, 'SB001', NULL,
    'R6.3 (API Errors): update of an unknown queue fails with SB001');
SELECT throws_ok($$SELECT sbq_update_queue(NULL, max_delivery_count => 3)$$, '22004', NULL,
    'R6.3 (API Errors): update with a NULL queue fails with 22004');

-- ------------------------------------------------------------ property ranges
SELECT throws_ok($$SELECT sbq_create_queue('t07_r1', lock_duration => '4 seconds')$$, '22023', NULL,
    'R2.2: lock_duration 4 s (below 5 s) fails with 22023');
SELECT throws_ok($$SELECT sbq_create_queue('t07_r2', lock_duration => '301 seconds')$$, '22023', NULL,
    'R2.1: lock_duration above 5 min fails with 22023');
SELECT lives_ok($$SELECT sbq_create_queue('t07_r3', lock_duration => '5 seconds')$$,
    'R2.2: lock_duration 5 s is accepted');
SELECT lives_ok($$SELECT sbq_create_queue('t07_r4', lock_duration => '5 minutes')$$,
    'R2.1: lock_duration 5 min is accepted');
SELECT throws_ok($$SELECT sbq_create_queue('t07_r5', max_delivery_count => 0)$$, '22023', NULL,
    'R3.7: max_delivery_count 0 fails with 22023');
SELECT lives_ok($$SELECT sbq_create_queue('t07_r6', max_delivery_count => 1)$$,
    'R3.7: max_delivery_count 1 is accepted');
SELECT throws_ok($$SELECT sbq_create_queue(NULL)$$, '22004', NULL,
    'R6.3 (API Errors): create with a NULL name fails with 22004');

-- ------------------------------------------------------------ names
SELECT throws_ok($$SELECT sbq_create_queue('')$$, '22023', NULL,
    'R6.3: an empty name fails with 22023');
SELECT throws_ok(format('SELECT sbq_create_queue(%L)', repeat('a', 261)), '22023', NULL,
    'R6.3: a 261-character name fails with 22023');
SELECT throws_ok($$SELECT sbq_create_queue('/orders')$$, '22023', NULL,
    'R6.3: a name with a leading / fails with 22023');
SELECT throws_ok($$SELECT sbq_create_queue('orders/')$$, '22023', NULL,
    'R6.3: a name with a trailing / fails with 22023');
SELECT throws_ok($$SELECT sbq_create_queue('has#hash')$$, '22023', NULL,
    'R6.3: a name with # fails with 22023');
SELECT throws_ok($$SELECT sbq_create_queue('.orders')$$, '22023', NULL,
    'R6.3: a name starting with a period fails with 22023');
SELECT throws_ok($$SELECT sbq_create_queue('t07_orders/$deadletterqueue')$$, '22023', NULL,
    'R6.3, R6.4: a dead-letter sub-queue name cannot be created (22023)');
SELECT lives_ok($$SELECT sbq_create_queue('orders.v1-eu_x')$$,
    'R6.3: the name orders.v1-eu_x is valid');
SELECT lives_ok($$SELECT sbq_create_queue('app/orders')$$,
    'R6.3: the name app/orders is valid');
SELECT lives_ok(format('SELECT sbq_create_queue(%L)', repeat('b', 260)),
    'R6.3: a 260-character name is valid');

-- ------------------------------------------------------------ purge
DO $$ BEGIN
    PERFORM sbq_create_queue('t07_p', max_delivery_count => 1);
    PERFORM sbq_send_batch('t07_p', ARRAY['p1', 'p2', 'p3', 'p4']::text[]);
    -- dead-letter p1 (max_delivery_count 1), lock p2
    PERFORM sbq_abandon('t07_p', (SELECT lock_token FROM sbq_receive('t07_p')));
    PERFORM count(*) FROM sbq_receive('t07_p');
END $$;
SELECT is(sbq_purge_queue('t07_p'), 3::bigint,
    '(API purge) R3.14: purge returns the number of messages deleted (not counting dead letters)');
SELECT is_empty($$SELECT * FROM sbq_peek('t07_p', 10)$$,
    '(API purge): after purge the queue has no messages');
SELECT is((SELECT count(*) FROM sbq_peek('t07_p/$deadletterqueue', 10)), 1::bigint,
    '(API purge) R3.14: purge keeps the dead letters');
SELECT is(sbq_purge_queue('t07_p/$deadletterqueue'), 1::bigint,
    '(API purge) R6.4: purge of <queue>/$deadletterqueue returns the number of dead letters');
SELECT is(sbq_purge_queue('t07_p'), 0::bigint,
    '(API purge): purge of an empty queue returns 0');
SELECT is((SELECT max_delivery_count FROM sbq_get_queue('t07_p')), 1,
    '(API purge): the queue still exists after purge');

-- ------------------------------------------------------------ delete
DO $$ BEGIN
    PERFORM sbq_create_queue('t07_d');
    PERFORM sbq_send_batch('t07_d', ARRAY['d1', 'd2']::text[]);
END $$;
SELECT lives_ok($$SELECT sbq_delete_queue('T07_D')$$,
    '(API delete) R6.3: delete (name in another letter case) succeeds');
SELECT throws_ok($$SELECT sbq_get_queue('t07_d')$$, 'SB001', NULL,
    '(API delete): get_queue of the deleted queue fails with SB001');
SELECT is_empty($$SELECT * FROM sbq_queues WHERE lower(queue) = 't07_d'$$,
    '(API delete): the deleted queue is gone from sbq_queues');
SELECT throws_ok($$SELECT sbq_send('t07_d', 'x'::text)$$, 'SB001', NULL,
    '(API delete): send to the deleted queue fails with SB001');
SELECT throws_ok($$SELECT * FROM sbq_receive('t07_d')$$, 'SB001', NULL,
    '(API delete): receive from the deleted queue fails with SB001');
DO $$ BEGIN PERFORM sbq_create_queue('t07_d'); END $$;
SELECT is_empty($$SELECT * FROM sbq_peek('t07_d', 10)$$,
    '(API delete): delete dropped the messages: a new queue of the same name is empty');
SELECT throws_ok($$SELECT sbq_delete_queue('t07_nosuch')$$, 'SB001', NULL,
    '(API Errors): delete of an unknown queue fails with SB001');
SELECT throws_ok($$SELECT sbq_purge_queue('t07_nosuch')$$, 'SB001', NULL,
    '(API Errors): purge of an unknown queue fails with SB001');
SELECT throws_ok($$SELECT sbq_get_queue('t07_nosuch')$$, 'SB001', NULL,
    '(API Errors): get_queue of an unknown queue fails with SB001');

-- ------------------------------------------------------------ stats
DO $$ BEGIN
    PERFORM sbq_create_queue('t07_s');
    PERFORM sbq_send_batch('t07_s', ARRAY['s1', 's2', 's3']::text[]);
    PERFORM count(*) FROM sbq_receive('t07_s');
END $$;
SELECT is((SELECT ARRAY[active_count, locked_count, deferred_count, scheduled_count, dead_letter_count, sent, received]
             FROM sbq_queue_stats WHERE queue = 't07_s'),
          ARRAY[2, 1, 0, 0, 0, 3, 1]::bigint[],
    'R11.1 (API Observability): 3 sent, 1 received: active 2, locked 1, others 0');

SELECT * FROM finish();
ROLLBACK;
