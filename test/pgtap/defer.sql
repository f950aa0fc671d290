-- sbqueue pgTAP: defer and receive_deferred (section 16 C, tests 23, 27-36, 38)
-- Sleeps: 5.5 s (locks taken by receive_deferred expire). Time checks use the wall clock.
BEGIN;
SELECT plan(82);

DO $$ BEGIN
    PERFORM sbq_create_queue('t10', lock_duration => '5 seconds');
    PERFORM sbq_create_queue('t10_other');
    PERFORM sbq_create_queue('t10_max1', max_delivery_count => 1);
    PERFORM sbq_create_queue('t10_max3', lock_duration => '5 seconds', max_delivery_count => 3);
END $$;

CREATE TEMP TABLE s (k text PRIMARY KEY, seq bigint);
INSERT INTO s VALUES
    ('m1', sbq_send('t10', 'm1'::text, message_id => 'm1', application_properties => '{"keep": "k", "a": 0}')),
    ('m2', sbq_send('t10', 'm2'::text, message_id => 'm2'));

-- ------------------------------------------------ defer (test 27)
CREATE TEMP TABLE r1 AS SELECT * FROM sbq_receive('t10');
SELECT is((SELECT message_id || ':' || delivery_count FROM r1), 'm1:1',
    'R3.1: the first receive returns m1 with delivery_count 1');
SELECT lives_ok($$SELECT sbq_defer('t10', (SELECT lock_token FROM r1))$$,
    'R4.3: defer with a valid lock succeeds');
SELECT throws_ok($$SELECT sbq_complete('t10', (SELECT lock_token FROM r1))$$, 'SB002', NULL,
    'R4.3, R2.9: after defer the token of that delivery is no longer a lock (SB002)');
CREATE TEMP TABLE r2 AS SELECT * FROM sbq_receive('t10', 10);
SELECT is((SELECT array_agg(message_id ORDER BY sequence_number) FROM r2), ARRAY['m2'],
    'R4.3, R1.10: receive skips the deferred message and returns the next active one');
SELECT is_empty($$SELECT * FROM sbq_receive('t10', 10, receive_mode => 'receive_and_delete')$$,
    'R1.10: receive_and_delete never returns a deferred message');
CREATE TEMP TABLE p1 AS SELECT * FROM sbq_peek('t10', 10);
SELECT is((SELECT state FROM p1 WHERE message_id = 'm1'), 'deferred',
    'R4.3, R1.14, R1.20: peek shows the deferred message with state deferred');
SELECT ok((SELECT lock_token IS NULL AND delivery_count = 1 AND sequence_number = (SELECT seq FROM s WHERE k = 'm1')
             FROM p1 WHERE message_id = 'm1'),
    'R4.3, R1.17: the peeked deferred message keeps its sequence number and delivery_count 1, without a lock token');
SELECT is((SELECT ARRAY[active_count, locked_count, deferred_count, scheduled_count, dead_letter_count]
             FROM sbq_queue_stats WHERE queue = 't10'), ARRAY[0, 1, 1, 0, 0]::bigint[],
    'R4.3 (API Observability): the deferred message is counted as deferred, not active or locked');

-- ------------------------------------------------ receive_deferred (test 28)
CREATE TEMP TABLE d1 AS
    SELECT *, clock_timestamp() AS at
      FROM sbq_receive_deferred('t10', ARRAY[(SELECT seq FROM s WHERE k = 'm1')]);
SELECT is((SELECT array_agg(message_id) FROM d1), ARRAY['m1'],
    'R4.5: receive_deferred returns the deferred message');
SELECT is((SELECT delivery_count FROM d1), 2,
    'R4.5, R3.3: the delivery by sequence number after a defer reports delivery_count 2');
SELECT is((SELECT state FROM d1), 'deferred',
    'R4.5: a message received by sequence number has state deferred');
SELECT ok((SELECT lock_token IS NOT NULL AND lock_token <> (SELECT lock_token FROM r1) FROM d1),
    'R2.3, R4.5: receive_deferred locks the message with a fresh lock token');
SELECT ok((SELECT locked_until BETWEEN at + interval '4 seconds' AND at + interval '5.5 seconds' FROM d1),
    'R4.5, R2.1: receive_deferred locks for lock_duration (5 s)');
SELECT is((SELECT ARRAY[active_count, locked_count, deferred_count] FROM sbq_queue_stats WHERE queue = 't10'),
          ARRAY[0, 2, 0]::bigint[],
    'R4.5 (API Observability): a deferred message under a valid lock counts as locked (no overlap)');

-- test 33: locked by receive_deferred
SELECT throws_ok(format('SELECT * FROM sbq_receive_deferred(%L, ARRAY[%s]::bigint[])', 't10',
                        (SELECT seq FROM s WHERE k = 'm1')), 'SB003', NULL,
    'R4.6: receive_deferred of a deferred message that is currently locked fails with SB003');

-- test 38: renew the lock of a message received by sequence number
SELECT ok(sbq_renew('t10', (SELECT lock_token FROM d1)) > (SELECT locked_until FROM d1),
    'R2.13: renew of a lock taken by receive_deferred returns a later locked_until');

-- ------------------------------------------------ abandon of a received deferred message (test 30)
SELECT lives_ok($$SELECT sbq_abandon('t10', (SELECT lock_token FROM d1))$$,
    'R4.7: abandon of a received deferred message succeeds');
SELECT is_empty($$SELECT * FROM sbq_receive('t10', 10)$$,
    'R4.7: abandon of a received deferred message keeps it deferred: receive does not return it');
SELECT is((SELECT state FROM sbq_peek('t10', 10) WHERE message_id = 'm1'), 'deferred',
    'R4.7: after the abandon peek still shows state deferred');
CREATE TEMP TABLE d2 AS SELECT * FROM sbq_receive_deferred('t10', ARRAY[(SELECT seq FROM s WHERE k = 'm1')]);
SELECT is((SELECT delivery_count FROM d2), 3,
    'R4.7, R3.4: the abandon was counted: the next receive_deferred reports delivery_count 3');

-- ------------------------------------------------ defer again with properties (test 31)
SELECT throws_ok($$SELECT sbq_defer('t10', (SELECT lock_token FROM d2), '[1]'::jsonb)$$, '22023', NULL,
    'R4.3 (API properties_to_modify): defer with a non-object properties_to_modify fails with 22023');
SELECT throws_ok($$SELECT sbq_defer('t10', (SELECT lock_token FROM d2), '"x"'::jsonb)$$, '22023', NULL,
    'R4.3 (API properties_to_modify): defer with a JSON string as properties_to_modify fails with 22023');
SELECT is((SELECT application_properties FROM sbq_peek('t10', 10) WHERE message_id = 'm1'), '{"keep": "k", "a": 0}'::jsonb,
    'R4.3: after the failed defers the properties are unchanged');
SELECT lives_ok($$SELECT sbq_renew('t10', (SELECT lock_token FROM d2))$$,
    'R4.3: after the failed defers the lock is still valid (nothing changed)');
SELECT lives_ok($$SELECT sbq_defer('t10', (SELECT lock_token FROM d2), '{"a": 1, "n": null}')$$,
    'R4.7: defer of a received deferred message with properties_to_modify succeeds');
SELECT is_empty($$SELECT * FROM sbq_receive('t10', 10)$$,
    'R4.7: defer again keeps the message deferred');
CREATE TEMP TABLE d3 AS SELECT * FROM sbq_receive_deferred('t10', ARRAY[(SELECT seq FROM s WHERE k = 'm1')]);
SELECT is((SELECT application_properties FROM d3), '{"keep": "k", "a": 1, "n": null}'::jsonb,
    'R4.3, R4.7: the properties were merged at the top level (new value replaces, JSON null kept)');
SELECT is((SELECT delivery_count FROM d3), 4,
    'R3.3: the second defer was counted: delivery_count 4');
SELECT throws_ok($$SELECT sbq_defer('t10', (SELECT lock_token FROM d2))$$, 'SB002', NULL,
    'R2.9: defer with the token of an already deferred delivery fails with SB002');

-- ------------------------------------------------ complete (test 29)
SELECT lives_ok($$SELECT sbq_complete('t10', (SELECT lock_token FROM d3))$$,
    'R4.7: complete of a received deferred message succeeds');
SELECT is_empty($$SELECT * FROM sbq_peek('t10', 10) WHERE message_id = 'm1'$$,
    'R4.7, R4.1: the completed deferred message is gone (peek)');
SELECT throws_ok(format('SELECT * FROM sbq_receive_deferred(%L, ARRAY[%s]::bigint[])', 't10',
                        (SELECT seq FROM s WHERE k = 'm1')), 'SB003', NULL,
    'R4.6: receive_deferred of a completed message fails with SB003');

-- ------------------------------------------------ deadletter (test 32)
INSERT INTO s VALUES ('m3', sbq_send('t10', 'm3'::text, message_id => 'm3'));
CREATE TEMP TABLE r3 AS SELECT * FROM sbq_receive('t10');
DO $$ BEGIN PERFORM sbq_defer('t10', (SELECT lock_token FROM r3)); END $$;
CREATE TEMP TABLE d4 AS SELECT * FROM sbq_receive_deferred('t10', ARRAY[(SELECT seq FROM s WHERE k = 'm3')]);
SELECT lives_ok($$SELECT sbq_deadletter('t10', (SELECT lock_token FROM d4), 'DeferredBad', 'given up')$$,
    'R4.7: deadletter of a received deferred message succeeds');
SELECT is((SELECT message_id || ':' || state || ':' || delivery_count || ':' || dead_letter_reason
             FROM sbq_peek('t10/$deadletterqueue', 10)), 'm3:active:2:DeferredBad',
    'R4.7, R3.5: the deferred message moved to the dead-letter queue (state active, delivery_count kept)');
SELECT is_empty($$SELECT * FROM sbq_peek('t10', 10) WHERE message_id = 'm3'$$,
    'R4.7: the dead-lettered deferred message left the queue');
SELECT throws_ok(format('SELECT * FROM sbq_receive_deferred(%L, ARRAY[%s]::bigint[])', 't10',
                        (SELECT seq FROM s WHERE k = 'm3')), 'SB003', NULL,
    'R4.6: receive_deferred on the queue of a message now in its dead-letter queue fails with SB003');

-- ------------------------------------------------ what receive_deferred refuses (tests 34, 35)
INSERT INTO s VALUES
    ('m4', sbq_send('t10', 'm4'::text, message_id => 'm4')),
    ('m5', sbq_send('t10', 'm5'::text, message_id => 'm5', scheduled_enqueue_time => now() + interval '1 hour')),
    ('o1', sbq_send('t10_other', 'o1'::text, message_id => 'o1'));
CREATE TEMP TABLE ro AS SELECT * FROM sbq_receive('t10_other');
DO $$ BEGIN PERFORM sbq_defer('t10_other', (SELECT lock_token FROM ro)); END $$;

SELECT throws_ok(format('SELECT * FROM sbq_receive_deferred(%L, ARRAY[%s]::bigint[])', 't10',
                        (SELECT max(seq) + 1000000 FROM s)), 'SB003', NULL,
    'R4.6: receive_deferred of an unknown sequence number fails with SB003');
SELECT throws_ok(format('SELECT * FROM sbq_receive_deferred(%L, ARRAY[%s]::bigint[])', 't10',
                        (SELECT seq FROM s WHERE k = 'm4')), 'SB003', NULL,
    'R4.6: receive_deferred of an active (never deferred) message fails with SB003');
SELECT throws_ok(format('SELECT * FROM sbq_receive_deferred(%L, ARRAY[%s]::bigint[])', 't10',
                        (SELECT seq FROM s WHERE k = 'm5')), 'SB003', NULL,
    'R4.6, R7.3: receive_deferred of a scheduled message fails with SB003');
SELECT throws_ok(format('SELECT * FROM sbq_receive_deferred(%L, ARRAY[%s]::bigint[])', 't10',
                        (SELECT seq FROM s WHERE k = 'o1')), 'SB003', NULL,
    'R4.6: receive_deferred of a deferred message of another queue fails with SB003');
SELECT throws_ok(format('SELECT * FROM sbq_receive_deferred(%L, ARRAY[%s]::bigint[])', 't10_other/$deadletterqueue',
                        (SELECT seq FROM s WHERE k = 'o1')), 'SB003', NULL,
    'R4.6, R3.15: receive_deferred on the dead-letter queue of a deferred message of the queue fails with SB003');
CREATE TEMP TABLE r4 AS SELECT * FROM sbq_receive('t10', 10);
SELECT is((SELECT array_agg(message_id || ':' || delivery_count) FROM r4), ARRAY['m4:1'],
    'R4.6: the active message asked for by sequence number was not locked or counted');
SELECT is((SELECT state FROM sbq_peek('t10', 10) WHERE message_id = 'm5'), 'scheduled',
    'R4.6: the scheduled message asked for by sequence number is still scheduled');
CREATE TEMP TABLE ro2 AS SELECT * FROM sbq_receive_deferred('t10_other', ARRAY[(SELECT seq FROM s WHERE k = 'o1')]);
SELECT is((SELECT message_id || ':' || delivery_count FROM ro2), 'o1:2',
    'R4.5: the deferred message of the other queue is received from its own queue');

-- all or nothing, duplicates, empty array, NULLs (tests 34, 36)
INSERT INTO s VALUES
    ('m6', sbq_send('t10', 'm6'::text, message_id => 'm6')),
    ('m7', sbq_send('t10', 'm7'::text, message_id => 'm7')),
    ('m8', sbq_send('t10', 'm8'::text, message_id => 'm8'));
CREATE TEMP TABLE r5 AS SELECT * FROM sbq_receive('t10', 3);
DO $$ BEGIN
    PERFORM sbq_defer('t10', lock_token) FROM r5;
END $$;
SELECT is((SELECT count(*) FROM sbq_peek('t10', 100) WHERE state = 'deferred'), 3::bigint,
    'R4.3: m6, m7, m8 are deferred');
SELECT throws_ok(format('SELECT * FROM sbq_receive_deferred(%L, ARRAY[%s, %s, %s]::bigint[])', 't10',
                        (SELECT seq FROM s WHERE k = 'm6'), (SELECT seq FROM s WHERE k = 'm7'),
                        (SELECT max(seq) + 1000000 FROM s)), 'SB003', NULL,
    'R4.6: receive_deferred with one unknown number among deferred ones fails with SB003');
SELECT throws_ok(format('SELECT * FROM sbq_receive_deferred(%L, ARRAY[%s, %s]::bigint[])', 't10',
                        (SELECT seq FROM s WHERE k = 'm6'), (SELECT seq FROM s WHERE k = 'm4')), 'SB003', NULL,
    'R4.6: receive_deferred with one locked active number among deferred ones fails with SB003');
SELECT is_empty($$SELECT * FROM sbq_receive_deferred('t10', ARRAY[]::bigint[])$$,
    'R4.5: receive_deferred with an empty array returns no rows');
SELECT throws_ok($$SELECT * FROM sbq_receive_deferred('t10', NULL)$$, '22004', NULL,
    'API Errors: receive_deferred with a NULL array fails with 22004');
SELECT throws_ok(format('SELECT * FROM sbq_receive_deferred(%L, ARRAY[%s, NULL]::bigint[])', 't10',
                        (SELECT seq FROM s WHERE k = 'm8')), '22004', NULL,
    'API Errors: receive_deferred with a NULL element fails with 22004');
SELECT throws_ok(format('SELECT * FROM sbq_receive_deferred(NULL, ARRAY[%s]::bigint[])',
                        (SELECT seq FROM s WHERE k = 'm8')), '22004', NULL,
    'API Errors: receive_deferred with a NULL queue fails with 22004');
SELECT throws_ok(format('SELECT * FROM sbq_receive_deferred(%L, ARRAY[%s]::bigint[])', 't10_nosuch',
                        (SELECT seq FROM s WHERE k = 'm8')), 'SB001', NULL,
    'API Errors: receive_deferred on an unknown queue fails with SB001');
SELECT is((SELECT count(*) FROM sbq_peek('t10', 100) WHERE state = 'deferred' AND locked_until IS NULL), 3::bigint,
    'R4.6: after the failed calls m6, m7, m8 are all still deferred and unlocked (nothing was locked)');
CREATE TEMP TABLE d5 AS
    SELECT * FROM sbq_receive_deferred('t10', ARRAY[(SELECT seq FROM s WHERE k = 'm7'),
                                                    (SELECT seq FROM s WHERE k = 'm6'),
                                                    (SELECT seq FROM s WHERE k = 'm7')]);
SELECT is((SELECT array_agg(message_id || ':' || delivery_count ORDER BY sequence_number) FROM d5), ARRAY['m6:2', 'm7:2'],
    'R4.5: receive_deferred locks several messages at once; a repeated number is returned once');
SELECT is((SELECT count(DISTINCT lock_token) FROM d5 WHERE lock_token IS NOT NULL), 2::bigint,
    'R4.5: each message received by sequence number has its own lock token');

-- ------------------------------------------------ defer errors
SELECT throws_ok($$SELECT sbq_defer('t10', gen_random_uuid())$$, 'SB002', NULL,
    'R2.9c: defer with a token never issued fails with SB002');
SELECT throws_ok($$SELECT sbq_defer('t10_other', (SELECT lock_token FROM r4))$$, 'SB002', NULL,
    'R2.9: defer with a token of another queue fails with SB002');
SELECT throws_ok($$SELECT sbq_defer('t10', NULL)$$, '22004', NULL,
    'API Errors: defer with a NULL token fails with 22004');
SELECT throws_ok($$SELECT sbq_defer(NULL, (SELECT lock_token FROM r4))$$, '22004', NULL,
    'API Errors: defer with a NULL queue fails with 22004');
SELECT throws_ok($$SELECT sbq_defer('t10_nosuch', (SELECT lock_token FROM r4))$$, 'SB001', NULL,
    'API Errors: defer on an unknown queue fails with SB001');
SELECT is((SELECT state FROM sbq_peek('t10', 100) WHERE message_id = 'm4'), 'active',
    'R2.9: after the failed defers m4 is still active');
SELECT lives_ok($$SELECT sbq_complete('t10', (SELECT lock_token FROM r4))$$,
    'R2.9: after the failed defers the lock of m4 is still valid');

-- ------------------------------------------------ defer on the last allowed delivery (test 23)
INSERT INTO s VALUES ('x', sbq_send('t10_max1', 'x'::text, message_id => 'x'));
CREATE TEMP TABLE x1 AS SELECT * FROM sbq_receive('t10_max1');
SELECT lives_ok($$SELECT sbq_defer('t10_max1', (SELECT lock_token FROM x1))$$,
    'R3.3: defer on the only allowed delivery (max_delivery_count 1) succeeds');
SELECT is_empty($$SELECT * FROM sbq_peek('t10_max1', 10)$$,
    'R3.3: with max_delivery_count 1 the defer leaves nothing in the queue');
SELECT is((SELECT message_id || ':' || dead_letter_reason || ':' || delivery_count FROM sbq_peek('t10_max1/$deadletterqueue')),
          'x:MaxDeliveryCountExceeded:1',
    'R3.3, R3.9: defer on the max_delivery_count-th delivery dead-letters with MaxDeliveryCountExceeded');
SELECT throws_ok(format('SELECT * FROM sbq_receive_deferred(%L, ARRAY[%s]::bigint[])', 't10_max1',
                        (SELECT seq FROM s WHERE k = 'x')), 'SB003', NULL,
    'R3.3, R4.6: the dead-lettered message cannot be received by sequence number from the queue');

-- max 3: receive, defer, receive_deferred, defer, receive_deferred (3rd delivery), defer
INSERT INTO s VALUES
    ('y', sbq_send('t10_max3', 'y'::text, message_id => 'y')),
    ('z', sbq_send('t10_max3', 'z'::text, message_id => 'z')),
    ('w', sbq_send('t10_max3', 'w'::text, message_id => 'w'));
CREATE TEMP TABLE y1 AS SELECT * FROM sbq_receive('t10_max3', 3);
DO $$ BEGIN PERFORM sbq_defer('t10_max3', lock_token) FROM y1; END $$;
CREATE TEMP TABLE y2 AS SELECT * FROM sbq_receive_deferred('t10_max3',
    ARRAY(SELECT seq FROM s WHERE k IN ('y', 'z', 'w')));
DO $$ BEGIN
    PERFORM sbq_defer('t10_max3', lock_token) FROM y2 WHERE message_id IN ('y', 'w');
    PERFORM sbq_abandon('t10_max3', lock_token) FROM y2 WHERE message_id = 'z';
END $$;
CREATE TEMP TABLE y3 AS SELECT * FROM sbq_receive_deferred('t10_max3',
    ARRAY(SELECT seq FROM s WHERE k IN ('y', 'z', 'w')));
SELECT is((SELECT array_agg(message_id || ':' || delivery_count ORDER BY sequence_number) FROM y3),
          ARRAY['y:3', 'z:3', 'w:3'],
    'R3.3, R3.4: defers and abandons of deferred messages count: the 3rd delivery reports 3');
SELECT lives_ok($$SELECT sbq_defer('t10_max3', (SELECT lock_token FROM y3 WHERE message_id = 'y'))$$,
    'R3.3: defer on the last allowed delivery (3 of 3) succeeds');
SELECT lives_ok($$SELECT sbq_abandon('t10_max3', (SELECT lock_token FROM y3 WHERE message_id = 'z'))$$,
    'R3.4: abandon of a deferred message on its last allowed delivery succeeds');
SELECT is((SELECT array_agg(message_id || ':' || dead_letter_reason ORDER BY sequence_number)
             FROM sbq_peek('t10_max3/$deadletterqueue', 10)),
          ARRAY['y:MaxDeliveryCountExceeded', 'z:MaxDeliveryCountExceeded'],
    'R3.3, R3.9: defer or abandon on the last allowed delivery of a deferred message dead-letters it');
SELECT ok((SELECT bool_and(coalesce(dead_letter_error_description, '') <> '' AND dead_letter_source = 't10_max3')
             FROM sbq_peek('t10_max3/$deadletterqueue', 10)),
    'R3.11 (test 22): a MaxDeliveryCountExceeded dead letter has a non-empty dead_letter_error_description and its source');
SELECT is((SELECT array_agg(message_id) FROM sbq_peek('t10_max3', 10)), ARRAY['w'],
    'R3.9: only w (still locked) is left in the queue');

-- ------------------------------------------------ lock expiry of a deferred message
INSERT INTO s VALUES ('v', sbq_send('t10', 'v'::text, message_id => 'v'));
CREATE TEMP TABLE v1 AS SELECT * FROM sbq_receive('t10');
DO $$ BEGIN PERFORM sbq_defer('t10', (SELECT lock_token FROM v1)); END $$;
CREATE TEMP TABLE v2 AS SELECT * FROM sbq_receive_deferred('t10', ARRAY[(SELECT seq FROM s WHERE k = 'v')]);
SELECT is((SELECT delivery_count FROM v2), 2,
    'R4.5: v received by sequence number reports delivery_count 2');

DO $$ BEGIN PERFORM pg_sleep(5.5); END $$;

SELECT throws_ok($$SELECT sbq_defer('t10', (SELECT lock_token FROM v2))$$, 'SB002', NULL,
    'R2.9a: defer after the lock expired fails with SB002');
SELECT throws_ok($$SELECT sbq_complete('t10', (SELECT lock_token FROM v2))$$, 'SB002', NULL,
    'R2.9a: complete of a deferred message after its lock expired fails with SB002');
SELECT is_empty($$SELECT * FROM sbq_receive('t10', 10) WHERE message_id = 'v'$$,
    'R4.7 (API: an expired lock leaves a deferred message deferred): receive never returns it');
SELECT ok((SELECT state = 'deferred' AND lock_token IS NULL FROM sbq_peek('t10', 100) WHERE message_id = 'v'),
    'R4.7: after its lock expired, peek shows v as deferred');
CREATE TEMP TABLE v3 AS SELECT * FROM sbq_receive_deferred('t10', ARRAY[(SELECT seq FROM s WHERE k = 'v')]);
SELECT is((SELECT message_id || ':' || delivery_count || ':' || state FROM v3), 'v:3:deferred',
    'R4.7, R3.2: after the lock expiry receive_deferred returns v again with delivery_count 3, state deferred');

-- the 3rd (last) delivery of w expired: it is over-delivered, not receivable by number
SELECT throws_ok(format('SELECT * FROM sbq_receive_deferred(%L, ARRAY[%s]::bigint[])', 't10_max3',
                        (SELECT seq FROM s WHERE k = 'w')), 'SB003', NULL,
    'R3.9, R4.6: receive_deferred of a deferred message whose last allowed delivery expired fails with SB003');
SELECT is((SELECT ARRAY[active_count, locked_count, deferred_count, dead_letter_count,
                        (SELECT count(*) FROM sbq_peek('t10_max3', 10) WHERE state = 'deferred'),
                        (SELECT count(*) FROM sbq_peek('t10_max3/$deadletterqueue', 10))]
             FROM sbq_queue_stats WHERE queue = 't10_max3'), ARRAY[0, 0, 1, 2, 1, 2]::bigint[],
    'R3.9 (API Observability): w, whose last lock expired, is deferred where peek shows it until it moves');
SELECT is((sbq_maintain() ->> 'dead_lettered')::int, 1, 'R3.9: maintenance dead-letters w');
SELECT is((SELECT ARRAY[active_count, locked_count, deferred_count, dead_letter_count,
                        (SELECT count(*) FROM sbq_peek('t10_max3/$deadletterqueue', 10))]
             FROM sbq_queue_stats WHERE queue = 't10_max3'), ARRAY[0, 0, 0, 3, 3]::bigint[],
    'R3.9 (API Observability): w counts as a dead letter once it is one');

SELECT * FROM finish();
ROLLBACK;
