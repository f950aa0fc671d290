-- sbqueue pgTAP: explicit dead-lettering, the dead-letter sub-queue, resubmit
-- (section 16 D, tests 22, 26, 40-43, 45, R3.15). No sleeps.
BEGIN;
SELECT plan(66);

DO $$ BEGIN
    PERFORM sbq_create_queue('t11', max_delivery_count => 2);
    PERFORM sbq_create_queue('t11_other');
END $$;

CREATE TEMP TABLE s (k text PRIMARY KEY, seq bigint);
INSERT INTO s VALUES
    ('m1', sbq_send('t11', 'body one'::text, message_id => 'm1', subject => 'subj',
                    application_properties => '{"x": "y", "p": "old"}'));

-- ------------------------------------------------ deadletter with reason, description, properties (test 40)
CREATE TEMP TABLE r1 AS SELECT * FROM sbq_receive('t11');
SELECT is((SELECT delivery_count FROM r1), 1, 'R3.1: m1 first delivery reports delivery_count 1');

SELECT throws_ok(format('SELECT sbq_deadletter(%L, %L::uuid, %L)', 't11', (SELECT lock_token FROM r1), repeat('r', 4097)),
    '22023', NULL, 'R3.12 (test 41): a reason longer than 4096 characters fails with 22023');
SELECT throws_ok(format('SELECT sbq_deadletter(%L, %L::uuid, %L, %L)', 't11', (SELECT lock_token FROM r1), 'ok',
                        repeat('d', 4097)),
    '22023', NULL, 'R3.12 (test 41): an error_description longer than 4096 characters fails with 22023');
SELECT throws_ok($$SELECT sbq_deadletter('t11', (SELECT lock_token FROM r1), 'r', 'd', '[1, 2]'::jsonb)$$,
    '22023', NULL, 'R4.4 (API properties_to_modify): a non-object properties_to_modify fails with 22023');
SELECT throws_ok($$SELECT sbq_deadletter('t11', gen_random_uuid(), 'r', 'd')$$,
    'SB002', NULL, 'R2.9c: deadletter with a token never issued fails with SB002');
SELECT throws_ok($$SELECT sbq_deadletter('t11_other', (SELECT lock_token FROM r1), 'r', 'd')$$,
    'SB002', NULL, 'R2.9: deadletter with a token of another queue fails with SB002');
SELECT throws_ok($$SELECT sbq_deadletter('t11', NULL, 'r', 'd')$$,
    '22004', NULL, 'API Errors: deadletter with a NULL token fails with 22004');
SELECT throws_ok($$SELECT sbq_deadletter('t11_nosuch', (SELECT lock_token FROM r1))$$,
    'SB001', NULL, 'API Errors: deadletter on an unknown queue fails with SB001');
SELECT is_empty($$SELECT * FROM sbq_peek('t11/$deadletterqueue', 10)$$,
    'R3.12, R2.9: after the failed deadletters nothing is in the dead-letter queue');
SELECT is((SELECT application_properties FROM sbq_peek('t11')), '{"x": "y", "p": "old"}'::jsonb,
    'R4.4: after the failed deadletters the properties are unchanged');
SELECT lives_ok($$SELECT sbq_renew('t11', (SELECT lock_token FROM r1))$$,
    'R2.9: after the failed deadletters the lock is still valid');

DO $$ BEGIN PERFORM sbq_abandon('t11', (SELECT lock_token FROM r1)); END $$;
CREATE TEMP TABLE r2 AS SELECT * FROM sbq_receive('t11');
SELECT is((SELECT delivery_count FROM r2), 2, 'R3.2: m1 second delivery reports delivery_count 2');
SELECT lives_ok($$SELECT sbq_deadletter('t11', (SELECT lock_token FROM r2), 'BadData', 'field x missing', '{"p": "q", "z": null}')$$,
    'R4.4: deadletter on the last allowed delivery with reason, description and properties succeeds');
SELECT is_empty($$SELECT * FROM sbq_peek('t11', 10)$$,
    'R4.4: the dead-lettered message left the queue (peek)');
SELECT is_empty($$SELECT * FROM sbq_receive('t11', 10)$$,
    'R4.4: the dead-lettered message is not received from the queue');
SELECT throws_ok($$SELECT sbq_complete('t11', (SELECT lock_token FROM r2))$$,
    'SB002', NULL, 'R2.9: the token of the dead-lettered delivery is no longer a lock (SB002)');

CREATE TEMP TABLE dl1 AS SELECT * FROM sbq_peek('t11/$deadletterqueue', 10);
SELECT is((SELECT count(*) FROM dl1), 1::bigint, 'R1.15: peek on the dead-letter queue shows the dead letter');
SELECT is((SELECT dead_letter_reason FROM dl1), 'BadData',
    'R4.4, R3.12: the given reason wins over MaxDeliveryCountExceeded on the last delivery');
SELECT is((SELECT dead_letter_error_description FROM dl1), 'field x missing',
    'R4.4, R3.12: dead_letter_error_description is the given description');
SELECT is((SELECT dead_letter_source FROM dl1), 't11',
    'API (dead-letter sub-queue): dead_letter_source is the queue name');
SELECT is((SELECT application_properties FROM dl1), '{"x": "y", "p": "q", "z": null}'::jsonb,
    'R4.4: properties_to_modify was merged into the dead letter''s properties');
SELECT is((SELECT message_id || '|' || convert_from(body, 'UTF8') || '|' || subject FROM dl1), 'm1|body one|subj',
    'R4.4: the dead letter keeps its message_id, body and other properties');
SELECT is((SELECT sequence_number FROM dl1), (SELECT seq FROM s WHERE k = 'm1'),
    'R4.4: the dead letter keeps its sequence number');
SELECT is((SELECT delivery_count FROM dl1), 2,
    'R3.5: dead-lettering keeps delivery_count');
SELECT is((SELECT state FROM dl1), 'active',
    'R4.4: the dead letter is active in the dead-letter queue');
SELECT is((SELECT ARRAY[active_count, locked_count, deferred_count, scheduled_count, dead_letter_count]
             FROM sbq_queue_stats WHERE queue = 't11'), ARRAY[0, 0, 0, 0, 1]::bigint[],
    'API Observability: the dead letter counts only as a dead letter');

-- ------------------------------------------------ the dead-letter queue (tests 22, 26, 42, 45)
CREATE TEMP TABLE q1 AS SELECT * FROM sbq_receive('T11/$DeadLetterQueue');
SELECT is((SELECT message_id || ':' || delivery_count FROM q1), 'm1:3',
    'R3.5 (API: the k-th delivery reports k): the first receive from the dead-letter queue reports delivery_count 3');
SELECT is((SELECT dead_letter_reason || '|' || dead_letter_error_description || '|' || dead_letter_source FROM q1),
          'BadData|field x missing|t11',
    'R3.12: the received dead letter carries reason, description and source');
SELECT throws_ok($$SELECT sbq_deadletter('t11/$deadletterqueue', (SELECT lock_token FROM q1), 'again')$$,
    'SB010', NULL, 'R3.14 (test 42): deadletter of a dead letter fails with SB010');
SELECT throws_ok($$SELECT sbq_deadletter('t11/$deadletterqueue', gen_random_uuid())$$,
    'SB010', NULL, 'R3.14: deadletter on the dead-letter queue fails with SB010 even with an unknown token');
SELECT is((SELECT dead_letter_reason FROM sbq_peek('t11/$deadletterqueue')), 'BadData',
    'R3.14: after the refused deadletter the message stays in the dead-letter queue unchanged');
SELECT throws_ok($$SELECT sbq_complete('t11', (SELECT lock_token FROM q1))$$,
    'SB002', NULL, 'R2.9: a dead-letter queue token does not settle on the queue itself (SB002)');
SELECT lives_ok($$SELECT sbq_renew('t11/$deadletterqueue', (SELECT lock_token FROM q1))$$,
    'R3.14, R2.5: renew works on the dead-letter queue (and the lock survived the refused calls)');
SELECT lives_ok($$SELECT sbq_abandon('t11/$deadletterqueue', (SELECT lock_token FROM q1), '{"tries": 1}')$$,
    'R3.14: abandon works on the dead-letter queue');
CREATE TEMP TABLE q2 AS SELECT * FROM sbq_receive('t11/$deadletterqueue');
DO $$ BEGIN PERFORM sbq_abandon('t11/$deadletterqueue', (SELECT lock_token FROM q2)); END $$;
CREATE TEMP TABLE q3 AS SELECT * FROM sbq_receive('t11/$deadletterqueue');
SELECT is((SELECT message_id || ':' || delivery_count FROM q3), 'm1:5',
    'R3.14, R3.6 (API: no delivery limit there, k-th delivery reports k): past max_delivery_count 2 it is still delivered from the dead-letter queue');
SELECT is((SELECT application_properties ->> 'tries' FROM q3), '1',
    'R4.2: abandon properties_to_modify works on the dead-letter queue');
SELECT is_empty($$SELECT * FROM sbq_peek('t11', 10)$$,
    'R3.14 (test 26): abandons in the dead-letter queue never move the message anywhere else');

-- defer and receive_deferred in the dead-letter queue (R3.15)
SELECT lives_ok($$SELECT sbq_defer('t11/$deadletterqueue', (SELECT lock_token FROM q3))$$,
    'R3.15: defer works on the dead-letter queue');
SELECT is_empty($$SELECT * FROM sbq_receive('t11/$deadletterqueue', 10)$$,
    'R3.15: the deferred dead letter is not returned by receive');
SELECT is((SELECT state FROM sbq_peek('t11/$deadletterqueue')), 'deferred',
    'R3.15, R1.20: peek on the dead-letter queue shows it deferred');
SELECT throws_ok(format('SELECT * FROM sbq_receive_deferred(%L, ARRAY[%s]::bigint[])', 't11',
                        (SELECT seq FROM s WHERE k = 'm1')), 'SB003', NULL,
    'R3.15, R4.6: a deferred dead letter is not received by sequence number from the queue itself');
CREATE TEMP TABLE q4 AS SELECT * FROM sbq_receive_deferred('t11/$deadletterqueue', ARRAY[(SELECT seq FROM s WHERE k = 'm1')]);
SELECT is((SELECT message_id || ':' || delivery_count || ':' || state FROM q4), 'm1:6:deferred',
    'R3.15: receive_deferred on the dead-letter queue returns the deferred dead letter');
SELECT lives_ok($$SELECT sbq_complete('t11/$deadletterqueue', (SELECT lock_token FROM q4))$$,
    'R3.14 (test 45): complete works on the dead-letter queue');
SELECT is_empty($$SELECT * FROM sbq_peek('t11/$deadletterqueue', 10)$$,
    'R3.14: the completed dead letter is gone');

-- ------------------------------------------------ peek separates queue and dead letters (test 43)
INSERT INTO s VALUES
    ('a', sbq_send('t11_other', 'a'::text, message_id => 'a')),
    ('b', sbq_send('t11_other', 'b'::text, message_id => 'b')),
    ('c', sbq_send('t11_other', 'c'::text, message_id => 'c')),
    ('d', sbq_send('t11_other', 'd'::text, message_id => 'd'));
CREATE TEMP TABLE o1 AS SELECT * FROM sbq_receive('t11_other', 3);
DO $$ BEGIN PERFORM sbq_deadletter('t11_other', lock_token) FROM o1; END $$;
SELECT is((SELECT array_agg(message_id ORDER BY sequence_number) FROM sbq_peek('t11_other', 10)), ARRAY['d'],
    'R1.14 (test 43): peek on the queue does not show its dead letters');
SELECT is((SELECT array_agg(message_id ORDER BY sequence_number) FROM sbq_peek('t11_other/$deadletterqueue', 10)),
          ARRAY['a', 'b', 'c'],
    'R1.15 (test 43): peek on the dead-letter queue shows them in sequence order');
SELECT ok((SELECT bool_and(dead_letter_reason IS NULL AND dead_letter_error_description IS NULL
                           AND dead_letter_source = 't11_other')
             FROM sbq_peek('t11_other/$deadletterqueue', 10)),
    'R4.4: deadletter without reason or description leaves them NULL; the source is set');

-- ------------------------------------------------ resubmit
-- lock b in the dead-letter queue; resubmit errors first
CREATE TEMP TABLE ob AS SELECT * FROM sbq_receive('t11_other/$deadletterqueue');
SELECT is((SELECT message_id FROM ob), 'a', 'R1.16: the dead-letter queue hands out its lowest sequence number first');
SELECT throws_ok(format('SELECT sbq_resubmit(%L, ARRAY[%s]::bigint[])', 't11_other', (SELECT seq FROM s WHERE k = 'a')),
    'SB003', NULL, 'API resubmit: resubmit of a dead letter under a valid lock fails with SB003');
SELECT throws_ok(format('SELECT sbq_resubmit(%L, ARRAY[%s, %s]::bigint[])', 't11_other',
                        (SELECT seq FROM s WHERE k = 'b'), (SELECT seq FROM s WHERE k = 'd')),
    'SB003', NULL, 'API resubmit: resubmit of a number that is an active message of the queue fails with SB003');
SELECT throws_ok(format('SELECT sbq_resubmit(%L, ARRAY[%s]::bigint[])', 't11',
                        (SELECT seq FROM s WHERE k = 'b')),
    'SB003', NULL, 'API resubmit: resubmit of a dead letter of another queue fails with SB003');
SELECT throws_ok(format('SELECT sbq_resubmit(%L, ARRAY[%s]::bigint[])', 't11_other',
                        (SELECT max(seq) + 1000000 FROM s)),
    'SB003', NULL, 'API resubmit: resubmit of an unknown number fails with SB003');
SELECT throws_ok(format('SELECT sbq_resubmit(%L, ARRAY[%s, NULL]::bigint[])', 't11_other', (SELECT seq FROM s WHERE k = 'b')),
    '22004', NULL, 'API Errors: resubmit with a NULL element fails with 22004');
SELECT throws_ok($$SELECT sbq_resubmit('t11_nosuch')$$,
    'SB001', NULL, 'API Errors: resubmit on an unknown queue fails with SB001');
SELECT is((SELECT array_agg(message_id ORDER BY sequence_number) FROM sbq_peek('t11_other/$deadletterqueue', 10)),
          ARRAY['a', 'b', 'c'],
    'API resubmit: after the failed resubmits all three dead letters are still there');

-- resubmit everything not under a valid lock, through the $deadletterqueue path
CREATE TEMP TABLE rs AS SELECT sbq_resubmit('t11_other/$deadletterqueue') AS n, clock_timestamp() AS at;
SELECT is((SELECT n FROM rs), 2, 'API resubmit: resubmit(NULL) moves the two unlocked dead letters and returns 2');
SELECT is((SELECT array_agg(message_id) FROM sbq_peek('t11_other/$deadletterqueue', 10)), ARRAY['a'],
    'API resubmit: the locked dead letter stays in the dead-letter queue');
CREATE TEMP TABLE pk AS SELECT * FROM sbq_peek('t11_other', 10);
SELECT is((SELECT array_agg(message_id ORDER BY sequence_number) FROM pk), ARRAY['d', 'b', 'c'],
    'API resubmit: the resubmitted messages join the back of the queue in their old order');
SELECT ok((SELECT bool_and(sequence_number > (SELECT max(seq) FROM s)) FROM pk WHERE message_id IN ('b', 'c')),
    'API resubmit: resubmitted messages get new, higher sequence numbers');
SELECT ok((SELECT bool_and(state = 'active' AND delivery_count = 0 AND dead_letter_reason IS NULL
                           AND dead_letter_error_description IS NULL AND dead_letter_source IS NULL)
             FROM pk WHERE message_id IN ('b', 'c')),
    'API resubmit: resubmitted messages are active, delivery_count 0, dead_letter_* cleared');
SELECT ok((SELECT bool_and(enqueued_time > (SELECT enqueued_time FROM o1 WHERE message_id = 'c')
                           AND enqueued_time <= (SELECT at FROM rs))
             FROM pk WHERE message_id IN ('b', 'c')),
    'API resubmit: resubmitted messages are enqueued now');
CREATE TEMP TABLE rr AS SELECT * FROM sbq_receive('t11_other', 10);
SELECT is((SELECT array_agg(message_id || ':' || delivery_count ORDER BY sequence_number) FROM rr),
          ARRAY['d:1', 'b:1', 'c:1'],
    'API resubmit: resubmitted messages are received again as first deliveries');

-- resubmit given numbers; the locked one after its lock is gone
DO $$ BEGIN PERFORM sbq_abandon('t11_other/$deadletterqueue', (SELECT lock_token FROM ob)); END $$;
DO $$ BEGIN PERFORM sbq_deadletter('t11_other', lock_token, 'again') FROM rr WHERE message_id = 'b'; END $$;
SELECT is(sbq_resubmit('t11_other', ARRAY[]::bigint[]), 0,
    'API resubmit: resubmit of an empty array moves nothing');
SELECT is(sbq_resubmit('t11_other', ARRAY[(SELECT seq FROM s WHERE k = 'a')]), 1,
    'API resubmit: resubmit of a given number moves that dead letter and returns 1');
SELECT is((SELECT array_agg(message_id) FROM sbq_peek('t11_other/$deadletterqueue', 10)), ARRAY['b'],
    'API resubmit: the other dead letter was not moved');
SELECT is((SELECT message_id || ':' || state FROM sbq_peek('t11_other', 10) WHERE message_id = 'a'), 'a:active',
    'API resubmit: the given dead letter is back in the queue');

SELECT * FROM finish();
ROLLBACK;
