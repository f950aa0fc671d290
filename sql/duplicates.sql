-- duplicate detection: the window's range, duplicates within the window, batches, scheduled
-- messages, rolled-back sends, per queue. No sleep (the window passing is tested with pgTAP).
\set VERBOSITY sqlstate

-- the window: 20 s .. 7 days
SELECT regress.err($$SELECT sbq_create_queue('dd_bad', duplicate_detection_window => '19.999 seconds')$$);
SELECT regress.err($$SELECT sbq_create_queue('dd_bad', duplicate_detection_window => '7 days 00:00:01')$$);
SELECT regress.err($$SELECT sbq_create_queue('dd_bad', duplicate_detection_window => '-1 minute')$$);
SELECT count(*) AS dd_bad FROM sbq_queues WHERE queue = 'dd_bad';
SELECT queue, duplicate_detection_window FROM sbq_create_queue('dd', duplicate_detection_window => '20 seconds');
SELECT queue, duplicate_detection_window FROM sbq_create_queue('dd_week', duplicate_detection_window => '7 days');
SELECT queue, duplicate_detection_window FROM sbq_create_queue('dd_off');
SELECT regress.err($$SELECT sbq_update_queue('dd_week', duplicate_detection_window => '10 seconds')$$);
SELECT regress.err($$SELECT sbq_update_queue('dd_week', duplicate_detection_window => '8 days')$$);
SELECT duplicate_detection_window FROM sbq_get_queue('dd_week');
SELECT queue, duplicate_detection_window FROM sbq_update_queue('dd_week', duplicate_detection_window => '1 hour');
SELECT queue, duplicate_detection_window FROM sbq_update_queue('dd_week', lock_duration => '1 minute');

-- a send of an id sent within the window stores nothing and returns the first number
SELECT sbq_send('dd', 'first A', message_id => 'A') AS a \gset
SELECT sbq_send('dd', 'second A', message_id => 'A', subject => 'other') = :a AS same_number;
SELECT sbq_send('dd', '\x00ff'::bytea, message_id => 'A') = :a AS same_number;
SELECT sbq_send('dd', '{"n": 1}'::jsonb, message_id => 'A') = :a AS same_number;
SELECT sbq_send('dd', 'lower a', message_id => 'a') = :a AS same_number;
SELECT sequence_number = :a AS first_number, message_id, convert_from(body, 'UTF8') AS body, subject
  FROM sbq_peek('dd', 10) ORDER BY sequence_number;
SELECT sent FROM sbq_queue_stats WHERE queue = 'dd';

-- without message_id every send is a new message
SELECT count(DISTINCT seq) AS distinct_numbers FROM (SELECT sbq_send('dd', 'same') AS seq
                                                      UNION ALL SELECT sbq_send('dd', 'same')) s;

-- a batch cannot share one message_id among several bodies (with detection on, all
-- but the first would be dropped unseen): 22023 and nothing stored, on any queue
SELECT regress.err($$SELECT sbq_send_batch('dd', ARRAY['b1', 'b2', 'b3'], message_id => 'B')$$);
SELECT regress.err($$SELECT sbq_send_batch('dd_off', ARRAY['\x01', '\x02']::bytea[], message_id => 'B')$$);
SELECT regress.err($$SELECT sbq_send_batch('dd', ARRAY['1', '2']::jsonb[], message_id => 'B')$$);
SELECT count(*) AS stored FROM sbq_peek('dd', 100) WHERE message_id = 'B';
SELECT count(*) AS stored_off FROM sbq_peek('dd_off', 100);
-- one body may have one: a duplicate then returns the first's number
SELECT seq = :a AS same_number FROM sbq_send_batch('dd', ARRAY['x'], message_id => 'A') AS seq;
-- each message its own id, in one call: detection applies message by message, in order
SELECT count(*) AS returned, count(DISTINCT seq) AS distinct_numbers,
       (array_agg(seq))[1] AS b, (array_agg(seq))[2] = (array_agg(seq))[1] AS b_twice,
       (array_agg(seq))[3] = :a AS a_again
  FROM sbq_send_batch('dd', ARRAY[sbq_new_message('b1', message_id => 'B'),
                                  sbq_new_message('b2', message_id => 'B'),
                                  sbq_new_message('y', message_id => 'A')]) AS seq \gset
\echo batch: :returned numbers returned, :distinct_numbers distinct, B twice the same: :b_twice, A the first one: :a_again
SELECT sequence_number = :b AS returned_number FROM sbq_peek('dd', 100) WHERE message_id = 'B';
SELECT convert_from(body, 'UTF8') AS body FROM sbq_peek('dd', 100) WHERE message_id IN ('A', 'B') ORDER BY sequence_number;

-- settled messages are still remembered within the window
SELECT sbq_send('dd', 'C', message_id => 'C') AS c \gset
SELECT count(*) AS completed FROM (SELECT sbq_complete('dd', lock_token) FROM sbq_receive('dd', 100)) s;
SELECT sbq_send('dd', 'C again', message_id => 'C') = :c AS same_number;
SELECT count(*) AS messages FROM sbq_peek('dd', 100);

-- scheduled messages take part
SELECT sbq_send('dd', 'S', message_id => 'S', scheduled_enqueue_time => now() + interval '1 hour') AS s \gset
SELECT sbq_send('dd', 'S now', message_id => 'S') = :s AS same_number;
SELECT sbq_send('dd', 'C later', message_id => 'C', scheduled_enqueue_time => now() + interval '1 hour') = :c AS same_number;
SELECT message_id, convert_from(body, 'UTF8') AS body, state FROM sbq_peek('dd', 100);

-- a rolled-back send is not remembered
BEGIN;
SELECT sbq_send('dd', 'rolled back', message_id => 'R') AS r \gset
ROLLBACK;
SELECT sbq_send('dd', 'kept', message_id => 'R') > :r AS new_number;
SELECT message_id, convert_from(body, 'UTF8') AS body FROM sbq_peek('dd', 100) WHERE message_id = 'R';

-- a send that fails is not remembered either
SELECT regress.err($$SELECT sbq_send('dd', 'x', message_id => 'F', time_to_live => '0')$$);
SELECT sbq_send('dd', 'F', message_id => 'F') > :r AS stored;
SELECT count(*) AS f_messages FROM sbq_peek('dd', 100) WHERE message_id = 'F';

-- per queue, and only with a window
SELECT sbq_send('dd_week', 'A', message_id => 'A') <> :a AS other_queue_new;
SELECT count(DISTINCT seq) AS distinct_numbers FROM (SELECT sbq_send('dd_off', 'one', message_id => 'A') AS seq
                                                      UNION ALL SELECT sbq_send('dd_off', 'two', message_id => 'A')) s;
SELECT count(*) AS dd_off_messages FROM sbq_peek('dd_off', 10);

-- the dead-letter sub-queue is no place to send to
SELECT regress.err($$SELECT sbq_send('dd/$deadletterqueue', 'x', message_id => 'A')$$);

SELECT sbq_delete_queue('dd');
SELECT sbq_delete_queue('dd_week');
SELECT sbq_delete_queue('dd_off');
