-- sbqueue pgTAP: peek-lock receive, complete, abandon, lock tokens (no sleeps)
BEGIN;
SELECT plan(38);

DO $$ BEGIN
    PERFORM sbq_create_queue('t01');
    PERFORM sbq_create_queue('t01_other');
    PERFORM sbq_create_queue('t01_batch');
END $$;

-- ---------------------------------------------------------------- receive
CREATE TEMP TABLE s1 AS SELECT sbq_send('t01', 'hello'::text, message_id => 'm1') AS seq;
CREATE TEMP TABLE r1 AS SELECT * FROM sbq_receive('t01');

SELECT is((SELECT count(*) FROM r1), 1::bigint,
    'R1.1: a peek_lock receive returns the one sent message');
SELECT is((SELECT sequence_number FROM r1), (SELECT seq FROM s1),
    'R1.12: the received message has the sequence number sbq_send returned');
SELECT ok((SELECT lock_token IS NOT NULL FROM r1),
    'R1.1, R2.3: a peek_lock receive gives a lock token');
SELECT is((SELECT delivery_count FROM r1), 1,
    'R3.1: the first delivery has delivery_count 1');
SELECT ok((SELECT locked_until BETWEEN clock_timestamp() + interval '28 seconds'
                                   AND clock_timestamp() + interval '31 seconds' FROM r1),
    'R2.1, R2.4: locked_until is about now + the 30 s default lock_duration');
SELECT is((SELECT state FROM r1), 'active',
    'R1.20: a received message is in state active');
SELECT is((SELECT body FROM r1), convert_to('hello', 'UTF8'),
    'R1.1: the body is the sent text as UTF-8 bytes');
SELECT is((SELECT message_id FROM r1), 'm1',
    'R1.1: the message_id is the one sent');
SELECT is_empty($$SELECT * FROM sbq_receive('t01')$$,
    'R1.1: a locked message is hidden from the next receive');

-- --------------------------------------------------------------- complete
SELECT lives_ok($$SELECT sbq_complete('t01', (SELECT lock_token FROM r1))$$,
    'R4.1: complete with a valid lock token succeeds');
SELECT is_empty($$SELECT * FROM sbq_peek('t01', 10)$$,
    'R4.1: a completed message is gone (peek)');
SELECT is_empty($$SELECT * FROM sbq_receive('t01')$$,
    'R4.1: a completed message is gone (receive)');
SELECT throws_ok($$SELECT sbq_complete('t01', (SELECT lock_token FROM r1))$$, 'SB002', NULL,
    'R2.9: complete of an already completed message fails with SB002');
SELECT throws_ok($$SELECT sbq_abandon('t01', (SELECT lock_token FROM r1))$$, 'SB002', NULL,
    'R2.9: abandon of an already completed message fails with SB002');
SELECT throws_ok($$SELECT sbq_renew('t01', (SELECT lock_token FROM r1))$$, 'SB002', NULL,
    'R2.9: renew of an already completed message fails with SB002');

-- ---------------------------------------------------------------- abandon
DO $$ BEGIN
    PERFORM sbq_send('t01', 'a1'::text, message_id => 'a1');
    PERFORM sbq_send('t01', 'a2'::text, message_id => 'a2');
END $$;
CREATE TEMP TABLE ra AS SELECT * FROM sbq_receive('t01');
SELECT lives_ok($$SELECT sbq_abandon('t01', (SELECT lock_token FROM ra))$$,
    'R4.2: abandon with a valid lock token succeeds');
CREATE TEMP TABLE rb AS SELECT * FROM sbq_receive('t01');
SELECT is((SELECT message_id FROM rb), 'a1',
    'R4.2, R1.11: the abandoned message is available at once and at the front, before a later message');
SELECT is((SELECT sequence_number FROM rb), (SELECT sequence_number FROM ra),
    'R1.11: the abandoned message keeps its sequence number');
SELECT is((SELECT delivery_count FROM rb), 2,
    'R4.2, R3.2: the redelivery after abandon has delivery_count 2');
SELECT isnt((SELECT lock_token FROM rb), (SELECT lock_token FROM ra),
    'R2.3: the redelivery has a new lock token');
SELECT throws_ok($$SELECT sbq_complete('t01', (SELECT lock_token FROM ra))$$, 'SB002', NULL,
    'R2.9: the token released by abandon no longer completes (SB002)');
SELECT throws_ok($$SELECT sbq_abandon('t01', (SELECT lock_token FROM ra))$$, 'SB002', NULL,
    'R2.9: the token released by abandon cannot abandon again (SB002)');

-- ------------------------------------------------- unknown and other-queue tokens
SELECT throws_ok($$SELECT sbq_complete('t01', gen_random_uuid())$$, 'SB002', NULL,
    'R2.9: complete with an unknown token fails with SB002');
SELECT throws_ok($$SELECT sbq_abandon('t01', gen_random_uuid())$$, 'SB002', NULL,
    'R2.9: abandon with an unknown token fails with SB002');
SELECT throws_ok($$SELECT sbq_renew('t01', gen_random_uuid())$$, 'SB002', NULL,
    'R2.9: renew with an unknown token fails with SB002');

CREATE TEMP TABLE so AS SELECT sbq_send('t01_other', 'other'::text) AS seq;
CREATE TEMP TABLE ro AS SELECT * FROM sbq_receive('t01_other');
SELECT throws_ok($$SELECT sbq_complete('t01', (SELECT lock_token FROM ro))$$, 'SB002', NULL,
    'R2.9: complete with a token from another queue fails with SB002');
SELECT throws_ok($$SELECT sbq_abandon('t01', (SELECT lock_token FROM ro))$$, 'SB002', NULL,
    'R2.9: abandon with a token from another queue fails with SB002');
SELECT throws_ok($$SELECT sbq_renew('t01', (SELECT lock_token FROM ro))$$, 'SB002', NULL,
    'R2.9: renew with a token from another queue fails with SB002');
SELECT lives_ok($$SELECT sbq_complete('t01_other', (SELECT lock_token FROM ro))$$,
    'R2.9: the token still completes the message in its own queue');

-- ------------------------------------------------------ complete(uuid[])
DO $$ BEGIN PERFORM sbq_send_batch('t01_batch', ARRAY['b1', 'b2', 'b3']::text[]); END $$;
CREATE TEMP TABLE rbat AS SELECT * FROM sbq_receive('t01_batch', 3);
SELECT throws_ok(
    $$SELECT sbq_complete('t01_batch', (SELECT array_agg(lock_token) FROM rbat) || gen_random_uuid())$$,
    'SB002', NULL,
    'R2.9, R4.1: complete(uuid[]) with one unknown token fails with SB002');
SELECT is((SELECT count(*) FROM sbq_peek('t01_batch', 10)), 3::bigint,
    'R4.1: complete(uuid[]) is all or nothing: after the failure no message was completed');
SELECT is(sbq_complete('t01_batch', (SELECT array_agg(lock_token) FROM rbat)), 3,
    'R4.1: complete(uuid[]) with three valid tokens returns 3');
SELECT is_empty($$SELECT * FROM sbq_peek('t01_batch', 10)$$,
    'R4.1: complete(uuid[]) removed all three messages');
SELECT throws_ok($$SELECT sbq_complete('t01_batch', (SELECT array_agg(lock_token) FROM rbat))$$,
    'SB002', NULL,
    'R2.9: complete(uuid[]) of already completed tokens fails with SB002');

-- ---------------------------------------------------------- NULL arguments
SELECT throws_ok($$SELECT sbq_complete('t01', NULL::uuid)$$, '22004', NULL,
    'R2.9 (API Errors): complete with a NULL token fails with 22004');
SELECT throws_ok($$SELECT sbq_abandon('t01', NULL::uuid)$$, '22004', NULL,
    'R2.9 (API Errors): abandon with a NULL token fails with 22004');
SELECT throws_ok($$SELECT sbq_renew('t01', NULL::uuid)$$, '22004', NULL,
    'R2.9 (API Errors): renew with a NULL token fails with 22004');

-- lock tokens: each one different, version 4, whether a receive takes one
-- (one by one, past several refills of the random bytes its backend draws
-- ahead) or many, under locks in shared memory or in the rows
SELECT sbq_create_queue('t01_tokens') IS NULL AS created \gset
SELECT count(*) FROM sbq_send_batch('t01_tokens', array_fill('t'::text, ARRAY[600])) \gset
CREATE TEMP TABLE t01_tok (tok uuid);
DO $$ BEGIN
    FOR i IN 1..200 LOOP
        INSERT INTO t01_tok SELECT lock_token FROM sbq_receive('t01_tokens');
    END LOOP;
    INSERT INTO t01_tok SELECT lock_token FROM sbq_receive('t01_tokens', 200);
    SET LOCAL sbqueue.memory_locks = off;
    FOR i IN 1..100 LOOP
        INSERT INTO t01_tok SELECT lock_token FROM sbq_receive('t01_tokens');
    END LOOP;
    INSERT INTO t01_tok SELECT lock_token FROM sbq_receive('t01_tokens', 100);
    SET LOCAL sbqueue.memory_locks = on;
END $$;
SELECT results_eq(
    $$SELECT count(*), count(DISTINCT tok),
             count(*) FILTER (WHERE tok::text ~ '^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$')
        FROM t01_tok$$,
    $$VALUES (600::bigint, 600::bigint, 600::bigint)$$,
    'lock tokens: 600 received one by one and in batches are version 4 UUIDs, all different');

SELECT * FROM finish();
ROLLBACK;
