-- sbqueue pgTAP: metrics (0.12): sbq_metrics, sbq_metrics_text(), sbq_lock_table(),
-- sbq_queue_table() (0.15).
-- The view has a sample a row in Prometheus's shape; its numbers are those of
-- sbq_queue_stats and sbq_topic_stats; a role sees the samples of the entities it
-- holds a right on; the lock table's figures come from shared memory (with the
-- preload and sbqueue.memory_locks on), and so do the table of queues' (with the preload) and the server's total only for
-- pg_read_all_stats; the text form has a HELP and a TYPE line per family and a line
-- per row of the view.
BEGIN;
SELECT plan(29);

SELECT has_view('sbq_metrics', 'metrics: the view sbq_metrics exists');
SELECT columns_are('sbq_metrics', ARRAY['metric', 'queue', 'state', 'value', 'type', 'help'],
    'metrics: sbq_metrics has metric, queue, state, value, type, help');
SELECT col_type_is('sbq_metrics', 'value', 'double precision', 'metrics: a value is a double precision');

-- a queue with two available messages, one locked, one deferred, one scheduled, one dead letter
DO $$ BEGIN
    PERFORM sbq_create_queue('mt_q');
    PERFORM sbq_send('mt_q', b) FROM unnest(ARRAY['1', '2', '3', '4', '5']) b;
    PERFORM sbq_send('mt_q', 'later'::text, scheduled_enqueue_time => now() + interval '1 hour');
    PERFORM sbq_create_topic('mt_t');
    PERFORM sbq_create_subscription('mt_t', 's');
    PERFORM sbq_send('mt_t', 'to s'::text);
END $$;
SELECT lock_token AS dl_token FROM sbq_receive('mt_q') \gset
SELECT sbq_deadletter('mt_q', :'dl_token'::uuid);
SELECT lock_token AS df_token FROM sbq_receive('mt_q') \gset
SELECT sbq_defer('mt_q', :'df_token'::uuid);
SELECT database_in_use AS in_use_before FROM sbq_lock_table() \gset
SELECT lock_token AS held_token FROM sbq_receive('mt_q') \gset

SELECT results_eq(
    $$SELECT state, value FROM sbq_metrics WHERE metric = 'sbq_messages' AND queue = 'mt_q' ORDER BY state$$,
    $$VALUES ('active', 2::float8), ('dead_letter', 1), ('deferred', 1), ('locked', 1), ('scheduled', 1)$$,
    'metrics: sbq_messages counts the queue''s messages by state');
SELECT is((SELECT count(*) FROM sbq_metrics m JOIN sbq_queue_stats s ON s.queue = m.queue
            WHERE m.value IS DISTINCT FROM CASE m.metric
                WHEN 'sbq_sent_total' THEN s.sent WHEN 'sbq_received_total' THEN s.received
                WHEN 'sbq_completed_total' THEN s.completed WHEN 'sbq_abandoned_total' THEN s.abandoned
                WHEN 'sbq_deferred_total' THEN s.deferred WHEN 'sbq_dead_lettered_total' THEN s.dead_lettered
                WHEN 'sbq_expired_total' THEN s.expired WHEN 'sbq_sessions' THEN s.session_count
                WHEN 'sbq_sessions_locked' THEN s.locked_session_count
                ELSE m.value END),
    0::bigint, 'metrics: every counter and session count is the one sbq_queue_stats shows');
SELECT results_eq(
    $$SELECT metric, value FROM sbq_metrics WHERE queue = 'mt_q' AND metric IN
        ('sbq_sent_total', 'sbq_received_total', 'sbq_deferred_total', 'sbq_dead_lettered_total') ORDER BY metric$$,
    $$VALUES ('sbq_dead_lettered_total', 1::float8), ('sbq_deferred_total', 1), ('sbq_received_total', 3),
             ('sbq_sent_total', 6)$$,
    'metrics: the counters count the sends, receives, defer and dead-lettering');
SELECT is((SELECT count(DISTINCT metric) FROM sbq_metrics WHERE queue = 'mt_q'), 11::bigint,
    'metrics: a queue has 11 families of samples');
SELECT ok((SELECT value >= 0 AND value < 600 FROM sbq_metrics
            WHERE metric = 'sbq_oldest_message_age_seconds' AND queue = 'mt_q'),
    'metrics: the oldest message''s age is in seconds');
SELECT is((SELECT count(*) FROM sbq_metrics WHERE metric LIKE '%\_total' AND type <> 'counter'
              OR metric NOT LIKE '%\_total' AND type <> 'gauge'), 0::bigint,
    'metrics: counters, and only they, are named _total');
SELECT results_eq(
    $$SELECT metric, value FROM sbq_metrics WHERE queue = 'mt_t' ORDER BY metric$$,
    $$VALUES ('sbq_topic_dropped_total', 0::float8), ('sbq_topic_sent_total', 1), ('sbq_topic_subscriptions', 1)$$,
    'metrics: a topic has its subscriptions, sent and dropped');
SELECT is((SELECT value FROM sbq_metrics WHERE metric = 'sbq_messages' AND state = 'active'
             AND queue = 'mt_t/subscriptions/s'), 1::float8,
    'metrics: a subscription has its samples under its address');

-- the lock table
SELECT is((SELECT value FROM sbq_metrics WHERE metric = 'sbq_lock_table_capacity'),
    CASE WHEN current_setting('shared_preload_libraries') ~ 'sbqueue'
         THEN current_setting('sbqueue.max_locks')::float8 ELSE 0 END,
    'metrics: the lock table''s capacity is sbqueue.max_locks with the preload');
SELECT is((SELECT database_share FROM sbq_lock_table()),
    CASE WHEN current_setting('shared_preload_libraries') !~ 'sbqueue' THEN 0
         WHEN current_setting('sbqueue.max_locks_per_database')::int < 0
         THEN current_setting('sbqueue.max_locks')::int / 4
         ELSE least(current_setting('sbqueue.max_locks_per_database')::int,
                    current_setting('sbqueue.max_locks')::int) END,
    'metrics: this database''s share follows sbqueue.max_locks_per_database');
SELECT is((SELECT database_in_use FROM sbq_lock_table()) - :in_use_before,
    CASE WHEN current_setting('shared_preload_libraries') ~ 'sbqueue'
              AND current_setting('sbqueue.memory_locks')::boolean THEN 1 ELSE 0 END,
    'metrics: a receive takes one entry of the lock table (with locks in shared memory)');
SELECT ok((SELECT in_use >= database_in_use FROM sbq_lock_table()),
    'metrics: the server''s entries include this database''s');
SELECT is((SELECT value FROM sbq_metrics WHERE metric = 'sbq_lock_table_database_in_use'),
    (SELECT database_in_use::float8 FROM sbq_lock_table()),
    'metrics: sbq_metrics shows sbq_lock_table()');
SELECT sbq_complete('mt_q', :'held_token'::uuid);

-- the table of queues (0.15)
SELECT is((SELECT capacity FROM sbq_queue_table()),
    CASE WHEN current_setting('shared_preload_libraries') ~ 'sbqueue'
         THEN current_setting('sbqueue.max_queues')::int ELSE 0 END,
    'metrics: the table of queues'' capacity is sbqueue.max_queues with the preload');
SELECT is((SELECT database_share FROM sbq_queue_table()),
    CASE WHEN current_setting('shared_preload_libraries') !~ 'sbqueue' THEN 0
         WHEN current_setting('sbqueue.max_queues_per_database')::int < 0
         THEN current_setting('sbqueue.max_queues')::int / 2
         ELSE least(current_setting('sbqueue.max_queues_per_database')::int,
                    current_setting('sbqueue.max_queues')::int) END,
    'metrics: this database''s share of it follows sbqueue.max_queues_per_database');
SELECT ok((SELECT CASE WHEN current_setting('shared_preload_libraries') ~ 'sbqueue'
                       THEN database_in_use >= 2 AND in_use >= database_in_use AND database_deleted = 0
                       ELSE database_in_use = 0 AND in_use = 0 AND database_deleted = 0 END
             FROM sbq_queue_table()),
    'metrics: the database has entries for itself and the queue sent to, within the server''s (with the preload)');
SELECT results_eq(
    $$SELECT metric, value FROM sbq_metrics
       WHERE metric IN ('sbq_queue_table_capacity', 'sbq_queue_table_database_share',
                        'sbq_queue_table_database_in_use', 'sbq_queue_table_database_deleted')
       ORDER BY metric$$,
    $$SELECT v.* FROM sbq_queue_table() t
       CROSS JOIN LATERAL (VALUES ('sbq_queue_table_capacity', t.capacity::float8),
                                  ('sbq_queue_table_database_deleted', t.database_deleted::float8),
                                  ('sbq_queue_table_database_in_use', t.database_in_use::float8),
                                  ('sbq_queue_table_database_share', t.database_share::float8)) v
       ORDER BY 1$$,
    'metrics: sbq_metrics shows sbq_queue_table()');

-- rights: a role with listen on mt_q sees mt_q only, and not the server's lock count
CREATE ROLE mt_reader;
SELECT sbq_grant('mt_q', 'mt_reader', ARRAY['listen']);
SET ROLE mt_reader;
SELECT results_eq($$SELECT DISTINCT queue FROM sbq_metrics WHERE queue IS NOT NULL$$, $$VALUES ('mt_q'::text)$$,
    'metrics: a role sees the samples of the queues it holds a right on, no other');
SELECT is((SELECT in_use FROM sbq_lock_table()), NULL,
    'metrics: the server''s lock-table entries are not shown to a role without pg_read_all_stats');
SELECT is((SELECT count(*) FROM sbq_metrics WHERE metric = 'sbq_lock_table_in_use'), 0::bigint,
    '... nor in sbq_metrics');
SELECT is((SELECT in_use FROM sbq_queue_table()), NULL,
    'metrics: nor the server''s entries of the table of queues');
SELECT is((SELECT count(*) FROM sbq_metrics WHERE metric = 'sbq_queue_table_in_use'), 0::bigint,
    '... nor those in sbq_metrics');
SELECT is((SELECT count(*) FROM regexp_split_to_table(sbq_metrics_text(), E'\n') l
            WHERE l ~ 'queue="' AND l !~ 'queue="mt_q"'), 0::bigint,
    'metrics: sbq_metrics_text() reads sbq_metrics as the caller');
RESET ROLE;

-- the text form: a HELP and a TYPE line per family, a line per sample
SELECT is((SELECT count(*) FROM regexp_split_to_table(rtrim(sbq_metrics_text(), E'\n'), E'\n')),
    (SELECT count(*) + 2 * count(DISTINCT metric) FROM sbq_metrics),
    'metrics: sbq_metrics_text() has a HELP and a TYPE line per family and a line per sample');
SELECT ok(sbq_metrics_text() ~ (E'\n# TYPE sbq_messages gauge\n(sbq_messages\\{[^\n]*\n)*sbq_messages\\{database="'
                                 || current_database() || E'",queue="mt_q",state="locked"\\} 0\n'),
    'metrics: a sample line names the database, the queue and the state');

SET LOCAL extra_float_digits = -15;
SELECT ok(sbq_metrics_text() ~ (E'\nsbq_lock_table_database_share\\{database="' || current_database() || E'"\\} '
                                 || (SELECT database_share FROM sbq_lock_table()) || E'\n'),
    'metrics: sbq_metrics_text() writes whole numbers in full whatever extra_float_digits says');
RESET extra_float_digits;

SELECT * FROM finish();
ROLLBACK;
