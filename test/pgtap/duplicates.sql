-- sbqueue pgTAP: duplicate detection (section 16 H, tests 59-62; R8.1-R8.5)
-- Sleeps: 21 s (once: the 20 s window of t14 passes). Time checks use the wall clock.
BEGIN;
SELECT plan(39);

-- ------------------------------------------------ the window's range (test 62)
SELECT throws_ok($$SELECT sbq_create_queue('t14_bad', duplicate_detection_window => '19 seconds')$$, '22023', NULL,
    'R8.3 (test 62): a window below 20 s fails with 22023');
SELECT throws_ok($$SELECT sbq_create_queue('t14_bad', duplicate_detection_window => '7 days 1 second')$$, '22023', NULL,
    'R8.3 (test 62): a window above 7 days fails with 22023');
SELECT throws_ok($$SELECT sbq_create_queue('t14_bad', duplicate_detection_window => '0')$$, '22023', NULL,
    'R8.3: a zero window fails with 22023');
SELECT is_empty($$SELECT * FROM sbq_queues WHERE queue = 't14_bad'$$,
    'R8.3: the failed creates made no queue');
SELECT is((SELECT duplicate_detection_window FROM sbq_create_queue('t14', duplicate_detection_window => '20 seconds')),
          interval '20 seconds', 'R8.3: a window of exactly 20 s is accepted');
SELECT is((SELECT duplicate_detection_window FROM sbq_create_queue('t14_week', duplicate_detection_window => '7 days')),
          interval '7 days', 'R8.3: a window of exactly 7 days is accepted');
SELECT throws_ok($$SELECT sbq_update_queue('t14_week', duplicate_detection_window => '10 seconds')$$, '22023', NULL,
    'R8.3 (test 62): update to a window below 20 s fails with 22023');
SELECT throws_ok($$SELECT sbq_update_queue('t14_week', duplicate_detection_window => '8 days')$$, '22023', NULL,
    'R8.3 (test 62): update to a window above 7 days fails with 22023');
SELECT is((SELECT duplicate_detection_window FROM sbq_get_queue('t14_week')), interval '7 days',
    'R8.3: the failed updates left the window as it was');

DO $$ BEGIN
    PERFORM sbq_create_queue('t14_upd', duplicate_detection_window => '20 seconds');
    PERFORM sbq_update_queue('t14_upd', duplicate_detection_window => '1 hour');
    PERFORM sbq_create_queue('t14_off');
END $$;
SELECT is((SELECT duplicate_detection_window FROM sbq_get_queue('t14_upd')), interval '1 hour',
    'API: sbq_update_queue changes the window');

-- ------------------------------------------------ duplicates within the window (test 59)
CREATE TEMP TABLE s (k text PRIMARY KEY, seq bigint);
INSERT INTO s VALUES ('A', sbq_send('t14', 'first A'::text, message_id => 'A'));
INSERT INTO s VALUES ('A2', sbq_send('t14', 'second A'::text, message_id => 'A', subject => 'other'));
SELECT is((SELECT seq FROM s WHERE k = 'A2'), (SELECT seq FROM s WHERE k = 'A'),
    'R8.1 (test 59): a send of a message_id already sent within the window returns the first message''s number');
SELECT is((SELECT array_agg(convert_from(body, 'UTF8')) FROM sbq_peek('t14', 10) WHERE message_id = 'A'), ARRAY['first A'],
    'R8.1 (test 59): the duplicate stored nothing; the first message is kept as it was');
SELECT is((SELECT sent FROM sbq_queue_stats WHERE queue = 't14'), 1::bigint,
    'R8.1: the dropped duplicate is not counted as sent');
INSERT INTO s VALUES ('A3', sbq_send('t14', '\x00ff'::bytea, message_id => 'A'));
INSERT INTO s VALUES ('A4', sbq_send('t14', '{"n": 1}'::jsonb, message_id => 'A'));
SELECT ok((SELECT count(DISTINCT seq) = 1 FROM s WHERE k LIKE 'A%'),
    'R8.1: the duplicate is detected whatever the body type (text, bytea, jsonb)');
INSERT INTO s VALUES ('a', sbq_send('t14', 'lower a'::text, message_id => 'a'));
SELECT isnt((SELECT seq FROM s WHERE k = 'a'), (SELECT seq FROM s WHERE k = 'A'),
    'R8.1: message ids are compared exactly: "a" is not a duplicate of "A"');

-- without message_id: fresh UUIDs, never duplicates
CREATE TEMP TABLE u AS SELECT sbq_send('t14', 'same'::text) AS seq UNION ALL SELECT sbq_send('t14', 'same'::text);
SELECT is((SELECT count(DISTINCT seq) FROM u), 2::bigint,
    'R8.1 (API: a NULL message_id is a new UUID): two sends without message_id are two messages');

-- batches
SELECT throws_ok($$SELECT sbq_send_batch('t14', ARRAY['b1', 'b2', 'b3']::text[], message_id => 'B')$$,
    '22023', 'message_id cannot be shared by the 3 messages of a batch',
    'R8.1 (API send_batch): one message_id for several bodies is refused, not deduplicated unseen');
SELECT is_empty($$SELECT * FROM sbq_peek('t14', 100) WHERE message_id = 'B'$$,
    'R8.1: the refused batch stored nothing');
CREATE TEMP TABLE b1 AS SELECT * FROM sbq_send_batch('t14', ARRAY[sbq_new_message('b1', message_id => 'B'),
                                                              sbq_new_message('b2', message_id => 'B'),
                                                              sbq_new_message('b3', message_id => 'B')])
                          WITH ORDINALITY AS x(seq, ord);
SELECT is((SELECT count(DISTINCT seq) || ':' || count(*) FROM b1), '1:3',
    'R8.1 (API send_batch of messages): three messages with one id return one number for every element');
SELECT is((SELECT array_agg(convert_from(body, 'UTF8')) FROM sbq_peek('t14', 100) WHERE message_id = 'B'), ARRAY['b1'],
    'R8.1: of three messages with one id the batch stored one, the first');
SELECT is((SELECT array_agg(DISTINCT x.seq) FROM sbq_send_batch('t14', ARRAY['x']::text[], message_id => 'A') AS x(seq)),
          ARRAY[(SELECT seq FROM s WHERE k = 'A')],
    'R8.1: a batch of one with a message_id already sent returns the first message''s number and stores nothing');

-- a consumed message is still remembered
INSERT INTO s VALUES ('C', sbq_send('t14', 'C'::text, message_id => 'C'));
DO $$ BEGIN PERFORM sbq_complete('t14', lock_token) FROM sbq_receive('t14', 100); END $$;
SELECT is_empty($$SELECT * FROM sbq_peek('t14', 100)$$, 'setup: every message of t14 was completed');
INSERT INTO s VALUES ('C2', sbq_send('t14', 'C again'::text, message_id => 'C'));
SELECT is((SELECT seq FROM s WHERE k = 'C2'), (SELECT seq FROM s WHERE k = 'C'),
    'R8.1: a message_id sent within the window is a duplicate even after the first message was completed');
SELECT is_empty($$SELECT * FROM sbq_peek('t14', 100)$$,
    'R8.1: the duplicate of a completed message stores nothing');

-- scheduled messages take part (R8.4, test 61)
INSERT INTO s VALUES ('S', sbq_send('t14', 'S'::text, message_id => 'S', scheduled_enqueue_time => clock_timestamp() + interval '1 hour'));
INSERT INTO s VALUES ('S2', sbq_send('t14', 'S now'::text, message_id => 'S'));
SELECT is((SELECT seq FROM s WHERE k = 'S2'), (SELECT seq FROM s WHERE k = 'S'),
    'R8.4 (test 61): a send of the id of a scheduled message within the window is a duplicate');
SELECT is((SELECT array_agg(state) FROM sbq_peek('t14', 100) WHERE message_id = 'S'), ARRAY['scheduled'],
    'R8.4 (test 61): only the scheduled message exists');
INSERT INTO s VALUES ('S3', sbq_send('t14', 'S later'::text, message_id => 'C', scheduled_enqueue_time => clock_timestamp() + interval '1 hour'));
SELECT is((SELECT seq FROM s WHERE k = 'S3'), (SELECT seq FROM s WHERE k = 'C'),
    'R8.4, R8.5: a scheduled send of an id already sent is a duplicate too');

-- a rolled-back send is forgotten
SAVEPOINT rb;
SELECT sbq_send('t14', 'rolled back'::text, message_id => 'R') AS rb_seq \gset
ROLLBACK TO SAVEPOINT rb;
INSERT INTO s VALUES ('R', sbq_send('t14', 'kept'::text, message_id => 'R'));
SELECT isnt((SELECT seq FROM s WHERE k = 'R'), :rb_seq::bigint,
    'R8.1 (API: a send commits with the caller''s transaction): a rolled-back send does not make a later one a duplicate');
SELECT is((SELECT array_agg(convert_from(body, 'UTF8')) FROM sbq_peek('t14', 100) WHERE message_id = 'R'), ARRAY['kept'],
    'R8.1: the send after the rolled-back one is stored');

-- per queue, and only with a window
INSERT INTO s VALUES ('A_upd', sbq_send('t14_upd', 'A'::text, message_id => 'A'));
SELECT isnt((SELECT seq FROM s WHERE k = 'A_upd'), (SELECT seq FROM s WHERE k = 'A'),
    'R8.1: duplicate detection is per queue: the same id in another queue is a new message');
CREATE TEMP TABLE off AS SELECT sbq_send('t14_off', 'one'::text, message_id => 'A') AS seq
                          UNION ALL SELECT sbq_send('t14_off', 'two'::text, message_id => 'A');
SELECT is((SELECT count(*) FROM sbq_peek('t14_off', 10) WHERE message_id = 'A'), 2::bigint,
    'R8.1: a queue without a window stores both messages with the same id');

-- ------------------------------------------------ after the window (test 60)
DO $$ BEGIN PERFORM pg_sleep(21); END $$;

INSERT INTO s VALUES ('A5', sbq_send('t14', 'A after the window'::text, message_id => 'A'));
SELECT isnt((SELECT seq FROM s WHERE k = 'A5'), (SELECT seq FROM s WHERE k = 'A'),
    'R8.1, R8.3 (test 60): after the window the id is accepted again with a new sequence number');
SELECT is((SELECT array_agg(convert_from(body, 'UTF8')) FROM sbq_peek('t14', 100) WHERE message_id = 'A'),
          ARRAY['A after the window'],
    'R8.1 (test 60): the send after the window is stored');
INSERT INTO s VALUES ('A6', sbq_send('t14', 'A again'::text, message_id => 'A'));
SELECT is((SELECT seq FROM s WHERE k = 'A6'), (SELECT seq FROM s WHERE k = 'A5'),
    'R8.1: the message sent after the window starts a new window: its next duplicate returns its number');
INSERT INTO s VALUES ('C3', sbq_send('t14', 'C after the window'::text, message_id => 'C'));
SELECT isnt((SELECT seq FROM s WHERE k = 'C3'), (SELECT seq FROM s WHERE k = 'C'),
    'R8.1 (test 60): the id of a completed message is accepted again after the window');

INSERT INTO s VALUES ('A_upd2', sbq_send('t14_upd', 'A again'::text, message_id => 'A'));
SELECT is((SELECT seq FROM s WHERE k = 'A_upd2'), (SELECT seq FROM s WHERE k = 'A_upd'),
    'API (sbq_update_queue changes the window): with the window updated to 1 hour the id is still a duplicate after 21 s');

-- maintenance forgets history older than the window
CREATE TEMP TABLE m1 AS SELECT sbq_maintain() AS j;
SELECT cmp_ok((SELECT (j ->> 'duplicates_forgotten')::int FROM m1), '>=', 4,
    'API Maintenance: maintain forgets the history of t14 older than the window (at least a, B, S, R)');
INSERT INTO s VALUES ('B2', sbq_send('t14', 'B after the window'::text, message_id => 'B'));
SELECT isnt((SELECT seq FROM s WHERE k = 'B2'), (SELECT seq FROM b1 LIMIT 1),
    'R8.1: after maintenance forgot it, the id is accepted as a new message');
INSERT INTO s VALUES ('A_upd3', sbq_send('t14_upd', 'A third'::text, message_id => 'A'));
SELECT is((SELECT seq FROM s WHERE k = 'A_upd3'), (SELECT seq FROM s WHERE k = 'A_upd'),
    'API Maintenance: maintain keeps history still within the (updated) window');

SELECT * FROM finish();
ROLLBACK;
