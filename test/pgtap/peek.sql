-- sbqueue pgTAP: peek (no sleeps)
BEGIN;
SELECT plan(18);

DO $$ BEGIN PERFORM sbq_create_queue('t05'); END $$;
CREATE TEMP TABLE s AS
    SELECT seq, ord FROM sbq_send_batch('t05', ARRAY['p1', 'p2', 'p3', 'p4', 'p5']::text[])
                         WITH ORDINALITY AS b(seq, ord);

SELECT is((SELECT array_agg(sequence_number) FROM sbq_peek('t05')),
          (SELECT array_agg(seq) FROM s WHERE ord = 1),
    'R1.13, R1.16: peek with the defaults returns one message, the first');
SELECT is((SELECT array_agg(p.sequence_number ORDER BY p.ordinality) FROM sbq_peek('t05', 10) WITH ORDINALITY AS p),
          (SELECT array_agg(seq ORDER BY ord) FROM s),
    'R1.16: peek(10) returns all five messages in sequence order');
SELECT is((SELECT array_agg(p.sequence_number ORDER BY p.ordinality)
             FROM sbq_peek('t05', 2, (SELECT seq FROM s WHERE ord = 3)) WITH ORDINALITY AS p),
          (SELECT array_agg(seq ORDER BY ord) FROM s WHERE ord IN (3, 4)),
    'R1.16: peek(2, from_sequence_number) starts at that sequence number');
SELECT is_empty(format('SELECT * FROM sbq_peek(%L, 10, %s)', 't05', (SELECT max(seq) + 1 FROM s)),
    'R1.16, R1.21: peek from past the last sequence number returns nothing');
SELECT ok((SELECT bool_and(lock_token IS NULL) FROM sbq_peek('t05', 10)),
    'R1.17: peeked messages have a NULL lock_token');

CREATE TEMP TABLE pk0 AS SELECT * FROM sbq_peek('t05', 10);

-- peek does not lock: everything is still receivable
CREATE TEMP TABLE r1 AS SELECT * FROM sbq_receive('t05');
SELECT is((SELECT sequence_number FROM r1), (SELECT seq FROM s WHERE ord = 1),
    'R1.17: after peeks the first message is still receivable (peek does not lock)');
SELECT is((SELECT delivery_count FROM r1), 1,
    'R1.17, R3.5: after several peeks the first receive reports delivery_count 1');

-- peek of a locked message
CREATE TEMP TABLE pk1 AS SELECT * FROM sbq_peek('t05', 10);
SELECT is((SELECT count(*) FROM pk1), 5::bigint,
    'R1.14: peek returns locked messages too');
SELECT ok((SELECT lock_token IS NULL FROM pk1 WHERE sequence_number = (SELECT sequence_number FROM r1)),
    'R1.17, R1.18: peek of a locked message does not reveal its lock_token');
SELECT is((SELECT array_agg(delivery_count ORDER BY sequence_number) FROM pk1 WHERE sequence_number <> (SELECT sequence_number FROM r1)),
          (SELECT array_agg(delivery_count ORDER BY sequence_number) FROM pk0 WHERE sequence_number <> (SELECT sequence_number FROM r1)),
    'R1.17, R3.5: peeking does not change delivery_count');
SELECT lives_ok($$SELECT sbq_renew('t05', (SELECT lock_token FROM r1))$$,
    'R1.17: peek does not disturb the lock of a locked message');

CREATE TEMP TABLE r2 AS SELECT * FROM sbq_receive('t05', 10);
SELECT is((SELECT array_agg(convert_from(body, 'UTF8') ORDER BY sequence_number) FROM r2), ARRAY['p2', 'p3', 'p4', 'p5'],
    'R1.17: messages peeked many times are all still receivable; the locked one is not returned');
SELECT ok((SELECT bool_and(delivery_count = 1) FROM r2),
    'R1.17, R3.5: their first receive reports delivery_count 1');

SELECT is((SELECT count(*) FROM sbq_peek('T05', 10)), 5::bigint,
    'R6.3: peek finds the queue by name in any letter case');
SELECT is_empty($$SELECT * FROM sbq_peek('t05/$deadletterqueue', 10)$$,
    'R1.15: peek on an empty dead-letter queue returns nothing');

SELECT throws_ok($$SELECT * FROM sbq_peek('t05', 0)$$, '22023', NULL,
    'R1.5 (API): peek max_messages 0 fails with 22023');
SELECT throws_ok($$SELECT * FROM sbq_peek('t05', 5001)$$, '22023', NULL,
    'R1.5 (API): peek max_messages 5001 fails with 22023');
SELECT throws_ok($$SELECT * FROM sbq_peek('t05_nosuch', 1)$$, 'SB001', NULL,
    'R6.3 (API Errors): peek on an unknown queue fails with SB001');

SELECT * FROM finish();
ROLLBACK;
