-- sbqueue pgTAP: lock expiry, renew, lock lost, dead-lettering at max_delivery_count via lock expiry
-- Sleeps: 3 s + 3.5 s + 6 s. Time checks use the wall clock, so locks expire inside this transaction.
BEGIN;
SELECT plan(28);

DO $$ BEGIN
    PERFORM sbq_create_queue('t03', lock_duration => '5 seconds');
    PERFORM sbq_create_queue('t03_max3', lock_duration => '5 seconds', max_delivery_count => 3);
    PERFORM sbq_create_queue('t03_max2', lock_duration => '5 seconds', max_delivery_count => 2);
    PERFORM sbq_send('t03', 'a1'::text, message_id => 'a1');
    PERFORM sbq_send('t03', 'a2'::text, message_id => 'a2');
    PERFORM sbq_send('t03', 'a3'::text, message_id => 'a3');
    PERFORM sbq_send('t03_max3', 'x'::text, message_id => 'x');
    PERFORM sbq_send('t03_max2', 'y'::text, message_id => 'y');
END $$;

-- t = 0: lock a1, a2, a3 for 5 s
CREATE TEMP TABLE r AS SELECT * FROM sbq_receive('t03', 3);
SELECT is((SELECT count(*) FROM r), 3::bigint,
    'R1.9: receive(3) returns the three messages');
SELECT ok((SELECT bool_and(locked_until BETWEEN clock_timestamp() + interval '3.5 seconds'
                                            AND clock_timestamp() + interval '5.5 seconds') FROM r),
    'R2.1, R2.4: locked_until is about now + lock_duration (5 s)');

-- t03_max3: deliveries 1 and 2 abandoned, delivery 3 left to expire
CREATE TEMP TABLE x1 AS SELECT * FROM sbq_receive('t03_max3');
DO $$ BEGIN PERFORM sbq_abandon('t03_max3', (SELECT lock_token FROM x1)); END $$;
CREATE TEMP TABLE x2 AS SELECT * FROM sbq_receive('t03_max3');
DO $$ BEGIN PERFORM sbq_abandon('t03_max3', (SELECT lock_token FROM x2)); END $$;
CREATE TEMP TABLE x3 AS SELECT * FROM sbq_receive('t03_max3');
SELECT is((SELECT delivery_count FROM x3), 3,
    'R3.9: the 3rd delivery of t03_max3 (max 3) reports delivery_count 3');

-- t03_max2: delivery 1 left to expire
CREATE TEMP TABLE y1 AS SELECT * FROM sbq_receive('t03_max2');
SELECT is((SELECT delivery_count FROM y1), 1,
    'R3.1: the first delivery of t03_max2 reports delivery_count 1');

-- t = 3: renew a2
DO $$ BEGIN PERFORM pg_sleep(3); END $$;
CREATE TEMP TABLE rn AS
    SELECT sbq_renew('t03', (SELECT lock_token FROM r WHERE message_id = 'a2')) AS until,
           clock_timestamp() AS at;
SELECT ok((SELECT until > (SELECT locked_until FROM r WHERE message_id = 'a2') + interval '2 seconds' FROM rn),
    'R2.5: renew returns a later locked_until');
SELECT ok((SELECT until BETWEEN at + interval '4 seconds' AND at + interval '5.5 seconds' FROM rn),
    'R2.5: the renewed lock lasts lock_duration (5 s) from the renew');

-- t = 6.5: the original locks have expired, a2's renewed lock has not
DO $$ BEGIN PERFORM pg_sleep(3.5); END $$;
SELECT throws_ok($$SELECT sbq_complete('t03', (SELECT lock_token FROM r WHERE message_id = 'a3'))$$,
    'SB002', NULL, 'R2.9, R2.6: complete after the lock expired fails with SB002');
SELECT throws_ok($$SELECT sbq_abandon('t03', (SELECT lock_token FROM r WHERE message_id = 'a3'))$$,
    'SB002', NULL, 'R2.9: abandon after the lock expired fails with SB002');
SELECT throws_ok($$SELECT sbq_renew('t03', (SELECT lock_token FROM r WHERE message_id = 'a3'))$$,
    'SB002', NULL, 'R2.6, R2.9: renew of an expired lock fails with SB002');
SELECT throws_ok($$SELECT sbq_complete('t03', ARRAY[(SELECT lock_token FROM r WHERE message_id = 'a3')])$$,
    'SB002', NULL, 'R2.9: complete(uuid[]) with an expired token fails with SB002');
SELECT is((SELECT locked_count FROM sbq_queue_stats WHERE queue = 't03'), 1::bigint,
    'R2.4 (API Observability): only the renewed lock counts as locked; expired locks do not');
SELECT lives_ok($$SELECT sbq_complete('t03', (SELECT lock_token FROM r WHERE message_id = 'a2'))$$,
    'R2.5: the renewed token is still valid after the original locked_until has passed');

CREATE TEMP TABLE rr AS SELECT * FROM sbq_receive('t03', 10);
SELECT is((SELECT array_agg(message_id ORDER BY sequence_number) FROM rr), ARRAY['a1', 'a3'],
    'R2.4, R2.10: the messages whose locks expired are available again (not the completed one)');
SELECT is((SELECT delivery_count FROM rr WHERE message_id = 'a1'), 2,
    'R2.4, R3.2: redelivery after lock expiry has delivery_count 2');
SELECT isnt((SELECT lock_token FROM rr WHERE message_id = 'a1'), (SELECT lock_token FROM r WHERE message_id = 'a1'),
    'R2.4: the redelivery has a new lock token');
SELECT throws_ok($$SELECT sbq_complete('t03', (SELECT lock_token FROM r WHERE message_id = 'a1'))$$,
    'SB002', NULL, 'R2.9: the old token of a redelivered message fails with SB002');
SELECT lives_ok($$SELECT sbq_complete('t03', (SELECT lock_token FROM rr WHERE message_id = 'a1'))$$,
    'R2.9: the new lock is unaffected by the failed settle with the old token');

-- t03_max3: the lock of the 3rd (last allowed) delivery expired
SELECT is_empty($$SELECT * FROM sbq_receive('t03_max3', 10)$$,
    'R3.9, R3.2: after the lock of the max_delivery_count-th delivery expired there is no 4th delivery');
SELECT is_empty($$SELECT * FROM sbq_peek('t03_max3', 10)$$,
    'R3.9, R2.10: after that receive the main queue is empty');
SELECT is((SELECT count(*) FROM sbq_peek('t03_max3/$deadletterqueue', 10)), 1::bigint,
    'R3.9, R2.10: the message is in the dead-letter queue');
SELECT is((SELECT dead_letter_reason FROM sbq_peek('t03_max3/$deadletterqueue')), 'MaxDeliveryCountExceeded',
    'R3.8, R3.11: reason MaxDeliveryCountExceeded after the lock expiry');
SELECT is((SELECT dead_letter_count FROM sbq_queue_stats WHERE queue = 't03_max3'), 1::bigint,
    'R3.9 (API Observability): sbq_queue_stats.dead_letter_count is 1');
SELECT throws_ok($$SELECT sbq_complete('t03_max3', (SELECT lock_token FROM x3))$$,
    'SB002', NULL, 'R2.9: the expired token of the dead-lettered message fails with SB002');

-- t03_max2: 2nd delivery after the first lock expired, then let it expire too
CREATE TEMP TABLE y2 AS SELECT * FROM sbq_receive('t03_max2');
SELECT is((SELECT delivery_count FROM y2), 2,
    'R2.4, R3.2: t03_max2: redelivery after lock expiry has delivery_count 2');
SELECT throws_ok($$SELECT sbq_renew('t03_max2', (SELECT lock_token FROM y1))$$,
    'SB002', NULL, 'R2.9: renew with the token of the expired first delivery fails with SB002');

-- t = 12.5
DO $$ BEGIN PERFORM pg_sleep(6); END $$;
SELECT is_empty($$SELECT * FROM sbq_receive('t03_max2', 10)$$,
    'R3.9, R3.2: max 2, both locks expired: there is no 3rd delivery');
SELECT is((SELECT dead_letter_reason FROM sbq_peek('t03_max2/$deadletterqueue')), 'MaxDeliveryCountExceeded',
    'R3.9: max 2, both locks expired: the message is dead-lettered with MaxDeliveryCountExceeded');
SELECT is((SELECT message_id FROM sbq_peek('t03_max2/$deadletterqueue')), 'y',
    'R3.9: the dead letter of t03_max2 is the sent message');

SELECT * FROM finish();
ROLLBACK;
