-- sbqueue pgTAP: receive_and_delete (no sleeps)
BEGIN;
SELECT plan(16);

DO $$ BEGIN
    PERFORM sbq_create_queue('t04');
    PERFORM sbq_send('t04', 'one'::text, message_id => 'r1');
    PERFORM sbq_send('t04', 'two'::text, message_id => 'r2');
END $$;

CREATE TEMP TABLE d AS SELECT * FROM sbq_receive('t04', 1, '0', 'receive_and_delete');
SELECT is((SELECT count(*) FROM d), 1::bigint,
    'R1.1, R1.6: receive_and_delete with max_messages 1 returns one message');
SELECT is((SELECT message_id FROM d), 'r1',
    'R1.12: receive_and_delete returns the lowest sequence number first');
SELECT ok((SELECT lock_token IS NULL FROM d),
    'R1.1, R1.3: a receive_and_delete message has a NULL lock_token');
SELECT ok((SELECT locked_until IS NULL FROM d),
    'R1.1: a receive_and_delete message has a NULL locked_until');
SELECT is((SELECT delivery_count FROM d), 1,
    'R1.1, R3.1: receive_and_delete counts as a delivery: 1 for a message never delivered');
SELECT is((SELECT body FROM d), convert_to('one', 'UTF8'),
    'R1.1: receive_and_delete returns the body');
SELECT is((SELECT array_agg(message_id) FROM sbq_peek('t04', 10)), ARRAY['r2'],
    'R1.1: the received message is removed (peek shows only the other one)');

CREATE TEMP TABLE p AS SELECT * FROM sbq_receive('t04', 10);
SELECT is((SELECT array_agg(message_id) FROM p), ARRAY['r2'],
    'R1.1: a later peek_lock receive does not return the removed message');
SELECT is((SELECT active_count + locked_count FROM sbq_queue_stats WHERE queue = 't04'), 1::bigint,
    'R1.1 (API Observability): only one message is left in the queue');

-- a message delivered once before, then received with receive_and_delete
DO $$ BEGIN PERFORM sbq_send('t04', 'three'::text, message_id => 'r3'); END $$;
CREATE TEMP TABLE p3 AS SELECT * FROM sbq_receive('t04');
DO $$ BEGIN PERFORM sbq_abandon('t04', (SELECT lock_token FROM p3)); END $$;
CREATE TEMP TABLE d3 AS SELECT * FROM sbq_receive('t04', 5, '0', 'receive_and_delete');
SELECT is((SELECT array_agg(message_id) FROM d3), ARRAY['r3'],
    'R1.1, R1.10: receive_and_delete skips the locked message and returns the abandoned one');
SELECT is((SELECT delivery_count FROM d3), 2,
    'R1.1, R3.2: receive_and_delete after one abandon reports delivery_count 2');

-- max_messages in receive_and_delete mode
DO $$ BEGIN PERFORM sbq_send_batch('t04', ARRAY['m4', 'm5', 'm6']::text[]); END $$;
CREATE TEMP TABLE d4 AS SELECT * FROM sbq_receive('t04', 2, '0', 'receive_and_delete');
SELECT is((SELECT array_agg(convert_from(body, 'UTF8') ORDER BY sequence_number) FROM d4), ARRAY['m4', 'm5'],
    'R1.6, R1.12: receive_and_delete max_messages 2 returns the two oldest');
SELECT is((SELECT array_agg(convert_from(body, 'UTF8') ORDER BY sequence_number) FROM sbq_peek('t04', 10)),
    ARRAY['two', 'm6'],
    'R1.1: both were removed; the locked message and the newest remain');
SELECT lives_ok($$SELECT sbq_complete('t04', (SELECT lock_token FROM p))$$,
    'R1.1: receive_and_delete did not disturb the peek_lock message''s lock');

SELECT throws_ok($$SELECT * FROM sbq_receive('t04', 1, '0', 'peek_and_lock')$$, '22023', NULL,
    'R1.2 (API Errors): an unknown receive_mode fails with 22023');
SELECT throws_ok($$SELECT * FROM sbq_receive('t04', 1, '0', NULL)$$, '22004', NULL,
    'R1.2 (API Errors): a NULL receive_mode fails with 22004');

SELECT * FROM finish();
ROLLBACK;
