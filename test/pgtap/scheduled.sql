-- sbqueue pgTAP: scheduled messages (section 16 G, tests 53-58; F test 50)
-- Sleeps: 3 s. Time checks use the wall clock.
BEGIN;
SELECT plan(38);

DO $$ BEGIN
    PERFORM sbq_create_queue('t13');
    PERFORM sbq_create_queue('t13_other');
    PERFORM sbq_create_queue('t13_peek');
END $$;

CREATE TEMP TABLE s (k text PRIMARY KEY, seq bigint);
INSERT INTO s VALUES ('first', sbq_send('t13', 'first'::text, message_id => 'first'));
INSERT INTO s VALUES ('s1', sbq_send('t13', 's1'::text, message_id => 's1',
                                      scheduled_enqueue_time => clock_timestamp() + interval '2 seconds'));
INSERT INTO s VALUES ('sttl', sbq_send('t13', 'sttl'::text, message_id => 'sttl', time_to_live => '2 seconds',
                                        scheduled_enqueue_time => clock_timestamp() + interval '2 seconds'));
INSERT INTO s VALUES ('mid', sbq_send('t13', 'mid'::text, message_id => 'mid'));
INSERT INTO s VALUES ('later', sbq_send('t13', 'later'::text, message_id => 'later',
                                         scheduled_enqueue_time => clock_timestamp() + interval '1 hour'));
INSERT INTO s VALUES ('past', sbq_send('t13', 'past'::text, message_id => 'past',
                                        scheduled_enqueue_time => clock_timestamp() - interval '1 minute'));
INSERT INTO s VALUES ('now', sbq_send('t13', 'now'::text, message_id => 'now', scheduled_enqueue_time => now()));
INSERT INTO s VALUES ('o1', sbq_send('t13_other', 'o1'::text, message_id => 'o1',
                                      scheduled_enqueue_time => clock_timestamp() + interval '1 hour'));

SELECT ok((SELECT bool_and(a.seq < b.seq) FROM s a JOIN s b
            ON (a.k, b.k) IN (('first', 's1'), ('s1', 'sttl'), ('sttl', 'mid'), ('mid', 'later'), ('later', 'past'), ('past', 'now'))),
    'R7.1: scheduling returns a sequence number, assigned in send order');

-- ------------------------------------------------ before the time (test 53)
CREATE TEMP TABLE p0 AS SELECT * FROM sbq_peek('t13', 100);
SELECT is((SELECT array_agg(message_id ORDER BY sequence_number) FROM p0),
          ARRAY['first', 's1', 'sttl', 'mid', 'later', 'past', 'now'],
    'R7.3, R1.14 (test 53): peek shows scheduled messages of a queue, in sequence order');
SELECT is((SELECT array_agg(state ORDER BY sequence_number) FROM p0),
          ARRAY['active', 'scheduled', 'scheduled', 'active', 'scheduled', 'active', 'active'],
    'R7.3, R1.20, R7.6: scheduled messages have state scheduled; a time in the past or now gives an active message');
SELECT is((SELECT sequence_number FROM p0 WHERE message_id = 's1'), (SELECT seq FROM s WHERE k = 's1'),
    'R7.3 (test 53): peek shows the scheduled message under the number sbq_send returned');
SELECT ok((SELECT scheduled_enqueue_time BETWEEN enqueued_time + interval '1.5 seconds' AND enqueued_time + interval '2.5 seconds'
             FROM p0 WHERE message_id = 's1'),
    'R7.1: the scheduled message carries its scheduled_enqueue_time');
SELECT is((SELECT expires_at - scheduled_enqueue_time FROM p0 WHERE message_id = 'sttl'), interval '2 seconds',
    'R7.5: the expiry of a scheduled message counts from its scheduled time');
SELECT is((SELECT ARRAY[active_count, locked_count, deferred_count, scheduled_count, dead_letter_count]
             FROM sbq_queue_stats WHERE queue = 't13'), ARRAY[4, 0, 0, 3, 0]::bigint[],
    'R7.3 (test 53): sbq_queue_stats counts 3 scheduled and 4 active messages');

CREATE TEMP TABLE r0 AS SELECT * FROM sbq_receive('t13', 100);
SELECT is((SELECT array_agg(message_id ORDER BY sequence_number) FROM r0), ARRAY['first', 'mid', 'past', 'now'],
    'R7.2, R1.10, R7.6 (tests 53, 57): receive returns only the active messages, the past-scheduled one after the earlier ones');
SELECT is_empty($$SELECT * FROM sbq_receive('t13', 100, receive_mode => 'receive_and_delete')$$,
    'R7.2: receive_and_delete never returns a message scheduled for the future');
DO $$ BEGIN PERFORM sbq_complete('t13', lock_token) FROM r0; END $$;

-- ------------------------------------------------ cancel (tests 55, 56)
SELECT throws_ok(format('SELECT sbq_cancel_scheduled(%L, %s)', 't13', (SELECT max(seq) + 1000000 FROM s)),
    'SB003', NULL, 'R7.9 (test 56): cancel of an unknown sequence number fails with SB003');
INSERT INTO s VALUES ('act', sbq_send('t13', 'act'::text, message_id => 'act'));
SELECT throws_ok(format('SELECT sbq_cancel_scheduled(%L, %s)', 't13', (SELECT seq FROM s WHERE k = 'act')),
    'SB003', NULL, 'R7.9: cancel of an active message fails with SB003');
SELECT throws_ok(format('SELECT sbq_cancel_scheduled(%L, %s)', 't13', (SELECT seq FROM s WHERE k = 'o1')),
    'SB003', NULL, 'R7.9: cancel of a scheduled message of another queue fails with SB003');
SELECT throws_ok(format('SELECT sbq_cancel_scheduled(%L, %s)', 't13/$deadletterqueue', (SELECT seq FROM s WHERE k = 'later')),
    'SB003', NULL, 'R7.9: cancel through the dead-letter queue path finds no scheduled message there (SB003)');
SELECT throws_ok($$SELECT sbq_cancel_scheduled('t13', NULL)$$,
    '22004', NULL, 'API Errors: cancel with a NULL sequence number fails with 22004');
SELECT throws_ok(format('SELECT sbq_cancel_scheduled(NULL, %s)', (SELECT seq FROM s WHERE k = 'later')),
    '22004', NULL, 'API Errors: cancel with a NULL queue fails with 22004');
SELECT throws_ok(format('SELECT sbq_cancel_scheduled(%L, %s)', 't13_nosuch', (SELECT seq FROM s WHERE k = 'later')),
    'SB001', NULL, 'API Errors: cancel on an unknown queue fails with SB001');
SELECT is((SELECT array_agg(message_id || ':' || state ORDER BY sequence_number) FROM sbq_peek('t13', 100)),
          ARRAY['s1:scheduled', 'sttl:scheduled', 'later:scheduled', 'act:active'],
    'R7.9: after the failed cancels every message of t13 is as it was');
SELECT is((SELECT message_id || ':' || state FROM sbq_peek('t13_other')), 'o1:scheduled',
    'R7.9: after the failed cancel the other queue''s scheduled message is as it was');
SELECT lives_ok(format('SELECT sbq_cancel_scheduled(%L, %s)', 'T13', (SELECT seq FROM s WHERE k = 'later')),
    'R7.2 (test 55): cancel of a scheduled message succeeds');
SELECT is_empty($$SELECT * FROM sbq_peek('t13', 100) WHERE message_id = 'later'$$,
    'R7.2 (test 55): cancel deletes the scheduled message');
SELECT is((SELECT scheduled_count FROM sbq_queue_stats WHERE queue = 't13'), 2::bigint,
    'R7.3 (test 55): the cancelled message is no longer counted as scheduled');
SELECT throws_ok(format('SELECT sbq_cancel_scheduled(%L, %s)', 't13', (SELECT seq FROM s WHERE k = 'later')),
    'SB003', NULL, 'R7.9: a second cancel of the same message fails with SB003');

-- scheduled batch
CREATE TEMP TABLE b AS SELECT * FROM sbq_send_batch('t13_other', ARRAY['b1', 'b2']::text[],
    scheduled_enqueue_time => clock_timestamp() + interval '1 hour') AS seq;
SELECT is((SELECT array_agg(state ORDER BY sequence_number) FROM sbq_peek('t13_other', 10)
            WHERE sequence_number IN (SELECT seq FROM b)), ARRAY['scheduled', 'scheduled'],
    'R7.1: sbq_send_batch with a future scheduled_enqueue_time schedules every message');

-- ------------------------------------------------ peek of every state (test 50)
CREATE TEMP TABLE pk (k text PRIMARY KEY, seq bigint);
INSERT INTO pk VALUES ('locked', sbq_send('t13_peek', 'locked'::text, message_id => 'locked'));
INSERT INTO pk VALUES ('deferred', sbq_send('t13_peek', 'deferred'::text, message_id => 'deferred'));
INSERT INTO pk VALUES ('dead', sbq_send('t13_peek', 'dead'::text, message_id => 'dead'));
CREATE TEMP TABLE pr AS SELECT * FROM sbq_receive('t13_peek', 3);
DO $$ BEGIN
    PERFORM sbq_defer('t13_peek', lock_token) FROM pr WHERE message_id = 'deferred';
    PERFORM sbq_deadletter('t13_peek', lock_token) FROM pr WHERE message_id = 'dead';
END $$;
INSERT INTO pk VALUES ('scheduled', sbq_send('t13_peek', 'scheduled'::text, message_id => 'scheduled',
                                              scheduled_enqueue_time => clock_timestamp() + interval '1 hour'));
INSERT INTO pk VALUES ('active', sbq_send('t13_peek', 'active'::text, message_id => 'active'));
CREATE TEMP TABLE pp AS SELECT * FROM sbq_peek('t13_peek', 10);
SELECT is((SELECT array_agg(message_id || ':' || state ORDER BY sequence_number) FROM pp),
          ARRAY['locked:active', 'deferred:deferred', 'scheduled:scheduled', 'active:active'],
    'R1.14, R1.20 (test 50): peek shows locked, deferred, scheduled and active messages with their states, not the dead letter');
SELECT ok((SELECT bool_and(lock_token IS NULL) FROM pp),
    'R1.17 (test 50): peek shows no lock tokens');
SELECT is((SELECT ARRAY[active_count, locked_count, deferred_count, scheduled_count, dead_letter_count]
             FROM sbq_queue_stats WHERE queue = 't13_peek'), ARRAY[1, 1, 1, 1, 1]::bigint[],
    'API Observability (test 93): one active, locked, deferred, scheduled and dead message are each counted once');

DO $$ BEGIN PERFORM pg_sleep(3); END $$;

-- ------------------------------------------------ t = 3: s1 and sttl are due (tests 54, 58)
CREATE TEMP TABLE r1 AS SELECT * FROM sbq_receive('t13', 100);
SELECT is((SELECT array_agg(message_id ORDER BY sequence_number) FROM r1), ARRAY['act', 's1', 'sttl'],
    'R7.4 (test 54): once due, a receive returns the scheduled messages after the messages already queued');
SELECT ok((SELECT bool_and(sequence_number > (SELECT max(seq) FROM s)) FROM r1 WHERE message_id IN ('s1', 'sttl')),
    'R7.4 (test 54): activated messages have new sequence numbers, higher than every number assigned before');
SELECT ok((SELECT sequence_number < (SELECT sequence_number FROM r1 WHERE message_id = 'sttl') FROM r1 WHERE message_id = 's1'),
    'R7.4: activated messages keep their relative order');
SELECT is((SELECT array_agg(state ORDER BY sequence_number) FROM r1 WHERE message_id IN ('s1', 'sttl')),
          ARRAY['active', 'active'],
    'R7.4 (test 54): activated messages have state active');
SELECT ok((SELECT bool_and(delivery_count = 1 AND lock_token IS NOT NULL) FROM r1),
    'R3.1: the activated messages are delivered for the first time, locked');
SELECT ok((SELECT bool_and(enqueued_time >= scheduled_enqueue_time) FROM r1 WHERE message_id IN ('s1', 'sttl')),
    'R7.4: an activated message is enqueued when it becomes active, not before its scheduled time');
SELECT is((SELECT message_id FROM r1 WHERE message_id = 'sttl'), 'sttl',
    'R7.5 (test 58): scheduled for +2 s with TTL 2 s, the message is still receivable at +3 s');
SELECT is_empty(format('SELECT * FROM sbq_peek(%L, 100) WHERE sequence_number = %s', 't13', (SELECT seq FROM s WHERE k = 's1')),
    'R7.4: the old sequence number of an activated message is gone');
SELECT throws_ok(format('SELECT sbq_cancel_scheduled(%L, %s)', 't13', (SELECT seq FROM s WHERE k = 's1')),
    'SB003', NULL, 'R7.4, R7.9: cancel with the number of a message already activated fails with SB003');
SELECT throws_ok(format('SELECT sbq_cancel_scheduled(%L, %s)', 't13',
                        (SELECT sequence_number FROM r1 WHERE message_id = 's1')),
    'SB003', NULL, 'R7.9: cancel with the new number of an activated message fails with SB003');
SELECT is((SELECT ARRAY[active_count, locked_count, scheduled_count] FROM sbq_queue_stats WHERE queue = 't13'),
          ARRAY[0, 3, 0]::bigint[],
    'R7.3: after activation nothing is counted as scheduled');
SELECT is((SELECT array_agg(convert_from(body, 'UTF8') || ':' || state ORDER BY sequence_number) FROM sbq_peek('t13_other', 10)),
          ARRAY['o1:scheduled', 'b1:scheduled', 'b2:scheduled'],
    'R7.2: messages scheduled for later are still scheduled');

SELECT * FROM finish();
ROLLBACK;
