-- sbqueue pgTAP: delivery_count and dead-lettering at max_delivery_count via abandon (no sleeps)
BEGIN;
SELECT plan(22);

DO $$ BEGIN
    PERFORM sbq_create_queue('t02', max_delivery_count => 3);
    PERFORM sbq_create_queue('t02_one', max_delivery_count => 1);
    PERFORM sbq_send('t02', 'x'::text, message_id => 'x');
    -- five peeks before the first receive
    PERFORM count(*) FROM sbq_peek('t02');
    PERFORM count(*) FROM sbq_peek('t02');
    PERFORM count(*) FROM sbq_peek('t02');
    PERFORM count(*) FROM sbq_peek('t02');
    PERFORM count(*) FROM sbq_peek('t02');
END $$;

CREATE TEMP TABLE d1 AS SELECT * FROM sbq_receive('t02');
SELECT is((SELECT delivery_count FROM d1), 1,
    'R1.17, R3.5: five peeks do not count; the first receive reports delivery_count 1');
DO $$ BEGIN
    PERFORM count(*) FROM sbq_peek('t02', 10);   -- a peek of the locked message
    PERFORM sbq_abandon('t02', (SELECT lock_token FROM d1));
    PERFORM count(*) FROM sbq_peek('t02', 10);   -- a peek of the abandoned message
END $$;
CREATE TEMP TABLE d2 AS SELECT * FROM sbq_receive('t02');
SELECT is((SELECT delivery_count FROM d2), 2,
    'R3.2, R4.2, R3.5: after one abandon (and peeks) the 2nd delivery reports delivery_count 2');
DO $$ BEGIN PERFORM sbq_abandon('t02', (SELECT lock_token FROM d2)); END $$;
CREATE TEMP TABLE d3 AS SELECT * FROM sbq_receive('t02');
SELECT is((SELECT delivery_count FROM d3), 3,
    'R3.9: the 3rd delivery (max_delivery_count 3) reports delivery_count 3');
SELECT is((SELECT message_id FROM d3), 'x',
    'R3.9: the 3rd delivery is still returned from the main queue');

SELECT lives_ok($$SELECT sbq_abandon('t02', (SELECT lock_token FROM d3))$$,
    'R3.9: abandon on the max_delivery_count-th delivery succeeds');
SELECT is_empty($$SELECT * FROM sbq_peek('t02', 10)$$,
    'R3.9: right after the 3rd abandon the main queue is empty (peek)');
SELECT is_empty($$SELECT * FROM sbq_receive('t02', 10)$$,
    'R3.9: there is never a 4th delivery from the main queue');
SELECT is((SELECT count(*) FROM sbq_peek('t02/$deadletterqueue', 10)), 1::bigint,
    'R3.9, R1.15: the message is in t02/$deadletterqueue');
SELECT is((SELECT dead_letter_reason FROM sbq_peek('t02/$deadletterqueue', 10)), 'MaxDeliveryCountExceeded',
    'R3.8, R3.11: its dead_letter_reason is MaxDeliveryCountExceeded');
SELECT is((SELECT message_id || ':' || convert_from(body, 'UTF8') FROM sbq_peek('t02/$deadletterqueue', 10)), 'x:x',
    'R3.9: the dead letter keeps its message_id and body');
SELECT throws_ok($$SELECT sbq_abandon('t02', (SELECT lock_token FROM d3))$$, 'SB002', NULL,
    'R2.9: the token of the dead-lettered delivery is no longer valid (SB002)');
SELECT is((SELECT dead_letter_count FROM sbq_queue_stats WHERE queue = 't02'), 1::bigint,
    'R3.9 (API Observability): sbq_queue_stats.dead_letter_count is 1');
SELECT is((SELECT active_count + locked_count FROM sbq_queue_stats WHERE queue = 't02'), 0::bigint,
    'R3.9 (API Observability): no active or locked message is left in the main queue');

-- the dead-letter sub-queue, addressed in another letter case
CREATE TEMP TABLE dl AS SELECT * FROM sbq_receive('T02/$DeadLetterQueue');
SELECT is((SELECT message_id FROM dl), 'x',
    'R1.15, R6.4: receive on <queue>/$DeadLetterQueue (any letter case) returns the dead letter');
SELECT ok((SELECT lock_token IS NOT NULL FROM dl),
    'R3.14: a peek_lock receive on the dead-letter queue locks the message');
SELECT is((SELECT delivery_count FROM dl), 4,
    'R3.5: dead-lettering keeps the count: the receive from the dead-letter queue is the 4th delivery');
SELECT lives_ok($$SELECT sbq_complete('t02/$deadletterqueue', (SELECT lock_token FROM dl))$$,
    'R3.14: complete works on the dead-letter queue');
SELECT is((SELECT dead_letter_count FROM sbq_queue_stats WHERE queue = 't02'), 0::bigint,
    'R3.14 (API Observability): after the complete no dead letter is left');

-- max_delivery_count 1: the first abandon dead-letters
CREATE TEMP TABLE o1 AS SELECT sbq_send('t02_one', 'one'::text, message_id => 'one') AS seq;
CREATE TEMP TABLE o2 AS SELECT * FROM sbq_receive('t02_one');
SELECT is((SELECT delivery_count FROM o2), 1,
    'R3.7, R3.9: with max_delivery_count 1 the first delivery is returned with delivery_count 1');
DO $$ BEGIN PERFORM sbq_abandon('t02_one', (SELECT lock_token FROM o2)); END $$;
SELECT is_empty($$SELECT * FROM sbq_receive('t02_one')$$,
    'R3.9: with max_delivery_count 1 an abandon leaves nothing to receive');
SELECT is((SELECT dead_letter_reason FROM sbq_peek('t02_one/$deadletterqueue')), 'MaxDeliveryCountExceeded',
    'R3.9: with max_delivery_count 1 the first abandon dead-letters with MaxDeliveryCountExceeded');
SELECT is((SELECT message_id FROM sbq_peek('t02_one/$deadletterqueue')), 'one',
    'R3.9: the dead letter of t02_one is the sent message');

SELECT * FROM finish();
ROLLBACK;
