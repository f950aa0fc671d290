-- examples/demo.sql: a walk through the peek-lock cycle of sbqueue.
-- Run it with psql against a database that has the extension in schema sbqueue
-- (CREATE SCHEMA sbqueue; CREATE EXTENSION sbqueue SCHEMA sbqueue):
--   psql -X -v ON_ERROR_STOP=1 -f examples/demo.sql
-- It can be run again in the same database: it starts by deleting the queues and
-- the topic an earlier run made (all named demo/...).
-- Every call names the schema: a call that does not can reach a function another
-- role created in a schema on your search_path (README, Security).
\pset footer off
\set VERBOSITY terse

\echo '--- start clean: delete what an earlier run of this demo left (nothing the first time)'
SELECT count(sbqueue.sbq_delete_topic(topic)) AS topics_deleted
  FROM sbqueue.sbq_topics WHERE topic = 'demo/events';
SELECT count(sbqueue.sbq_delete_queue(queue)) AS queues_deleted
  FROM sbqueue.sbq_queues WHERE queue IN ('demo/orders', 'demo/payments', 'demo/order-steps');

\echo '--- a queue: 5 s locks, a message is dead-lettered on its 3rd failed delivery'
SELECT queue, lock_duration, max_delivery_count
  FROM sbqueue.sbq_create_queue('demo/orders', lock_duration => '5 seconds', max_delivery_count => 3);

\echo '--- send: text, JSON with application properties, and a batch'
SELECT sbqueue.sbq_send('demo/orders', 'order #1: two coffees') AS sequence_number;
SELECT sbqueue.sbq_send('demo/orders', '{"order": 2, "item": "tea"}'::jsonb,
                subject => 'order', application_properties => '{"priority": "high"}') AS sequence_number;
SELECT * FROM sbqueue.sbq_send_batch('demo/orders', ARRAY['order #3', 'order #4']) AS sequence_number;

\echo '--- peek: look at the queue without locking anything (a jsonb body reads back as jsonb prints it)'
SELECT sequence_number, state, delivery_count, content_type, convert_from(body, 'UTF8') AS body
  FROM sbqueue.sbq_peek('demo/orders', 10);

\echo '--- receive in peek-lock mode: the message gets a lock token and a lock that expires'
SELECT sequence_number AS seq1, lock_token AS token1, locked_until AS until1,
       delivery_count AS count1, convert_from(body, 'UTF8') AS body1
  FROM sbqueue.sbq_receive('demo/orders') \gset
\echo received :seq1 '(' :body1 ') delivery_count' :count1
\echo '    lock token' :token1 'locked until' :until1
\echo '--- it stays in the queue, hidden from other receivers: the next receive gets the next one'
SELECT sequence_number AS seq2, lock_token AS token2, convert_from(body, 'UTF8') AS body2
  FROM sbqueue.sbq_receive('demo/orders') \gset
\echo received :seq2 '(' :body2 ') lock token' :token2

\echo '--- complete both with one call: they are gone for good'
SELECT sbqueue.sbq_complete('demo/orders', ARRAY[:'token1', :'token2']::uuid[]) AS completed;
SELECT sequence_number, state, convert_from(body, 'UTF8') AS body FROM sbqueue.sbq_peek('demo/orders', 10);

\echo '--- receive and abandon: the message is available again at once, delivery_count 2'
SELECT lock_token AS token3 FROM sbqueue.sbq_receive('demo/orders') \gset
SELECT sbqueue.sbq_abandon('demo/orders', :'token3');
SELECT sequence_number, delivery_count, convert_from(body, 'UTF8') AS body
  FROM sbqueue.sbq_receive('demo/orders', receive_mode => 'receive_and_delete');

\echo '--- a poison message: abandoned on every delivery until it is dead-lettered'
SELECT sbqueue.sbq_purge_queue('demo/orders') AS purged;
SELECT sbqueue.sbq_send('demo/orders', 'poison: cannot be parsed') AS sequence_number;
DO $$
DECLARE
    m sbqueue.sbq_message;
BEGIN
    LOOP
        SELECT * INTO m FROM sbqueue.sbq_receive('demo/orders');
        EXIT WHEN m.sequence_number IS NULL;
        RAISE NOTICE 'delivery % of message %: processing failed, abandon',
            m.delivery_count, m.sequence_number;
        PERFORM sbqueue.sbq_abandon('demo/orders', m.lock_token,
                            jsonb_build_object('last_error', 'parse error on delivery ' || m.delivery_count));
    END LOOP;
    RAISE NOTICE 'the queue hands out nothing more';
END $$;

\echo '--- the dead-letter sub-queue holds it, with the reason'
SELECT sequence_number, delivery_count, dead_letter_reason, dead_letter_error_description,
       application_properties, convert_from(body, 'UTF8') AS body
  FROM sbqueue.sbq_peek('demo/orders/$deadletterqueue');

\echo '--- receive it from the dead-letter sub-queue and complete it there'
SELECT sequence_number AS dead_seq, lock_token AS dead_token
  FROM sbqueue.sbq_receive('demo/orders/$deadletterqueue') \gset
SELECT sbqueue.sbq_complete('demo/orders/$deadletterqueue', :'dead_token'::uuid);
\echo completed dead letter :dead_seq

\echo '--- settling the same token again is refused with SQLSTATE SB002 (message lock lost)'
\set VERBOSITY verbose
\set ON_ERROR_STOP 0
SELECT sbqueue.sbq_complete('demo/orders/$deadletterqueue', :'dead_token'::uuid);
\set ON_ERROR_STOP 1
\set VERBOSITY terse

\echo '--- dead-letter a message by hand, then resubmit it: it goes back to the queue as a new message'
SELECT sbqueue.sbq_send('demo/orders', 'poison: fixed upstream') AS sequence_number;
SELECT lock_token AS poison_token FROM sbqueue.sbq_receive('demo/orders') \gset
SELECT sbqueue.sbq_deadletter('demo/orders', :'poison_token', 'BadData', 'customer id missing');
SELECT sequence_number, dead_letter_reason, dead_letter_error_description
  FROM sbqueue.sbq_peek('demo/orders/$deadletterqueue');
SELECT sbqueue.sbq_resubmit('demo/orders') AS resubmitted;
SELECT sequence_number, delivery_count, convert_from(body, 'UTF8') AS body FROM sbqueue.sbq_peek('demo/orders');
SELECT sbqueue.sbq_purge_queue('demo/orders') AS purged;

\echo '--- defer: set a message aside, then fetch it by its sequence number'
SELECT sbqueue.sbq_send('demo/orders', 'needs approval') AS deferred_seq \gset
SELECT lock_token AS defer_token FROM sbqueue.sbq_receive('demo/orders') \gset
SELECT sbqueue.sbq_defer('demo/orders', :'defer_token');
SELECT count(*) AS ordinary_receive_gets FROM sbqueue.sbq_receive('demo/orders', 10);
SELECT sequence_number, state, delivery_count, convert_from(body, 'UTF8') AS body
  FROM sbqueue.sbq_receive_deferred('demo/orders', ARRAY[:deferred_seq]::bigint[]);

\echo '--- scheduled: invisible to receive until due, then received under a new sequence number'
SELECT sbqueue.sbq_send('demo/orders', 'in two seconds', message_id => 'reminder-1',
                scheduled_enqueue_time => clock_timestamp() + interval '2 seconds') AS sequence_number;
SELECT sequence_number, message_id, state FROM sbqueue.sbq_peek('demo/orders', 10) WHERE state = 'scheduled';
SELECT count(*) AS received_now FROM sbqueue.sbq_receive('demo/orders');
SELECT sequence_number, message_id, state, convert_from(body, 'UTF8') AS body
  FROM sbqueue.sbq_receive('demo/orders', max_wait => '5 seconds');

\echo '--- duplicate detection: a retried send stores nothing and returns the first number'
SELECT queue, duplicate_detection_window
  FROM sbqueue.sbq_create_queue('demo/payments', duplicate_detection_window => '10 minutes');
SELECT sbqueue.sbq_send('demo/payments', 'charge 10 EUR', message_id => 'payment-1') AS first_send,
       sbqueue.sbq_send('demo/payments', 'charge 10 EUR', message_id => 'payment-1') AS retried_send;
SELECT count(*) AS stored FROM sbqueue.sbq_peek('demo/payments', 10);

\echo '--- sessions: FIFO per order, one holder at a time, and state kept between holders'
SELECT queue, requires_session
  FROM sbqueue.sbq_create_queue('demo/order-steps', requires_session => true);
SELECT sbqueue.sbq_send('demo/order-steps', step, session_id => order_id)
  FROM (VALUES ('order-1', 'paid'), ('order-2', 'paid'), ('order-1', 'packed'),
               ('order-1', 'shipped'), ('order-2', 'packed')) v(order_id, step);
SELECT session_id, available_count FROM sbqueue.sbq_list_sessions('demo/order-steps');
-- a worker takes the next session (the one whose oldest message is oldest) ...
SELECT session_id, session_token FROM sbqueue.sbq_accept_session('demo/order-steps') \gset
-- ... nobody else can take it meanwhile: asking for it by name is refused with SB005
\set VERBOSITY verbose
\set ON_ERROR_STOP 0
SELECT * FROM sbqueue.sbq_accept_session('demo/order-steps', :'session_id');
\set ON_ERROR_STOP 1
\set VERBOSITY terse
-- ... the holder gets its messages in order, completes them and keeps a state
BEGIN;
CREATE TEMP TABLE steps ON COMMIT DROP AS
  SELECT * FROM sbqueue.sbq_receive_session('demo/order-steps', :'session_token', 10);
SELECT sequence_number, convert_from(body, 'UTF8') AS step FROM steps ORDER BY sequence_number;
SELECT sbqueue.sbq_complete('demo/order-steps', array_agg(lock_token)) AS completed FROM steps;
COMMIT;
SELECT sbqueue.sbq_set_session_state('demo/order-steps', :'session_token', convert_to('shipped', 'UTF8'));
SELECT sbqueue.sbq_release_session('demo/order-steps', :'session_token');
SELECT session_id, has_state, available_count, locked_until IS NOT NULL AS held
  FROM sbqueue.sbq_list_sessions('demo/order-steps');
-- the next holder of the same session finds the state the last one left
SELECT session_token AS next_token
  FROM sbqueue.sbq_accept_session('demo/order-steps', :'session_id') \gset
SELECT :'session_id' AS session_id,
       convert_from(sbqueue.sbq_get_session_state('demo/order-steps', :'next_token'), 'UTF8') AS state;
SELECT sbqueue.sbq_release_session('demo/order-steps', :'next_token');

\echo '--- topics: one send, a copy in every subscription whose rules match'
SELECT topic FROM sbqueue.sbq_create_topic('demo/events');
SELECT subscription FROM sbqueue.sbq_create_subscription('demo/events', 'audit');
SELECT subscription FROM sbqueue.sbq_create_subscription('demo/events', 'big-eu');
SELECT sbqueue.sbq_remove_rule('demo/events', 'big-eu', '$Default');
SELECT sbqueue.sbq_add_rule('demo/events', 'big-eu', 'eu-over-100',
    sql_filter => 'region = ''eu'' AND amount > 100', action => 'SET flagged = TRUE');
SELECT sbqueue.sbq_send('demo/events', 'order ' || n,
    application_properties => jsonb_build_object('region', region, 'amount', amount)) AS topic_number
  FROM (VALUES (1, 'eu', 250), (2, 'us', 900), (3, 'eu', 20)) v(n, region, amount);
SELECT s.subscription, convert_from(m.body, 'UTF8') AS body, m.application_properties
  FROM sbqueue.sbq_subscriptions s,
       LATERAL sbqueue.sbq_receive(s.topic || '/subscriptions/' || s.subscription, 10,
                                   receive_mode => 'receive_and_delete') m
 WHERE s.topic = 'demo/events' ORDER BY 1, 2;
SELECT topic, subscription_count, sent, dropped FROM sbqueue.sbq_topic_stats;

\echo '--- what happened, counted'
SELECT queue, active_count, locked_count, dead_letter_count, sent, received, completed,
       abandoned, dead_lettered
  FROM sbqueue.sbq_queue_stats ORDER BY queue;
