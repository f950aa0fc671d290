/* sql/sbqueue--0.14--0.15.sql: from 0.14 to 0.15 (how full the table of queues in shared memory is) */

\echo Use "ALTER EXTENSION sbqueue UPDATE TO '0.15'" to load this file. \quit

/*
 * How full the table of queues in shared memory is (src/qstate.c, 0.15): its
 * capacity (sbqueue.max_queues), the entries of the whole server (NULL but
 * for pg_read_all_stats), this database's share, its entries, and those of
 * them whose queue or topic is deleted, not freed yet. A queue without an
 * entry works, more slowly. All 0 without the preload.
 */
CREATE FUNCTION sbq_queue_table(
    OUT capacity integer, OUT in_use bigint, OUT database_share integer,
    OUT database_in_use integer, OUT database_deleted integer)
    RETURNS record
    AS 'MODULE_PATHNAME', 'sbq_queue_table_sql'
    LANGUAGE C VOLATILE PARALLEL RESTRICTED;
GRANT EXECUTE ON FUNCTION sbq_queue_table() TO PUBLIC;

/* sbq_metrics: the same rows, and five of the table of queues after the lock table's */
CREATE OR REPLACE VIEW sbq_metrics WITH (security_barrier) AS
    SELECT m.metric, s.queue, m.state, m.value, m.type, m.help
      FROM sbq_queue_stats s
     CROSS JOIN LATERAL (VALUES
        ('sbq_messages', 'active', s.active_count::pg_catalog.float8, 'gauge',
         'Messages by state: available (active), under a lock, deferred, scheduled, in the dead-letter sub-queue'),
        ('sbq_messages', 'locked', s.locked_count::pg_catalog.float8, 'gauge', NULL),
        ('sbq_messages', 'deferred', s.deferred_count::pg_catalog.float8, 'gauge', NULL),
        ('sbq_messages', 'scheduled', s.scheduled_count::pg_catalog.float8, 'gauge', NULL),
        ('sbq_messages', 'dead_letter', s.dead_letter_count::pg_catalog.float8, 'gauge', NULL),
        ('sbq_oldest_message_age_seconds', NULL,
         coalesce(pg_catalog.date_part('epoch', pg_catalog.statement_timestamp()
                                                OPERATOR(pg_catalog.-) s.oldest_enqueued_time), 0),
         'gauge', 'Age of the oldest message (0 when there is none)'),
        ('sbq_sessions', NULL, s.session_count::pg_catalog.float8, 'gauge',
         'Sessions with messages or state'),
        ('sbq_sessions_locked', NULL, s.locked_session_count::pg_catalog.float8, 'gauge',
         'Sessions held by a receiver'),
        ('sbq_sent_total', NULL, s.sent::pg_catalog.float8, 'counter', 'Messages sent'),
        ('sbq_received_total', NULL, s.received::pg_catalog.float8, 'counter', 'Deliveries'),
        ('sbq_completed_total', NULL, s.completed::pg_catalog.float8, 'counter', 'Messages completed'),
        ('sbq_abandoned_total', NULL, s.abandoned::pg_catalog.float8, 'counter', 'Messages abandoned'),
        ('sbq_deferred_total', NULL, s.deferred::pg_catalog.float8, 'counter', 'Messages deferred'),
        ('sbq_dead_lettered_total', NULL, s.dead_lettered::pg_catalog.float8, 'counter',
         'Messages dead-lettered'),
        ('sbq_expired_total', NULL, s.expired::pg_catalog.float8, 'counter',
         'Messages whose time to live ran out')
     ) m(metric, state, value, type, help)
    UNION ALL
    SELECT m.metric, t.topic, NULL, m.value, m.type, m.help
      FROM sbq_topic_stats t
     CROSS JOIN LATERAL (VALUES
        ('sbq_topic_subscriptions', t.subscription_count::pg_catalog.float8, 'gauge',
         'Subscriptions of the topic'),
        ('sbq_topic_sent_total', t.sent::pg_catalog.float8, 'counter',
         'Messages sent to the topic (duplicates not counted)'),
        ('sbq_topic_dropped_total', t.dropped::pg_catalog.float8, 'counter',
         'Messages no subscription took')
     ) m(metric, value, type, help)
    UNION ALL
    SELECT m.metric, NULL, NULL, m.value, 'gauge', m.help
      FROM sbq_lock_table() l
     CROSS JOIN LATERAL (VALUES
        ('sbq_lock_table_capacity', l.capacity::pg_catalog.float8,
         'Entries of the lock table in shared memory (sbqueue.max_locks; 0 without the preload)'),
        ('sbq_lock_table_in_use', l.in_use::pg_catalog.float8,
         'Entries in use in the whole server (shown to pg_read_all_stats only)'),
        ('sbq_lock_table_database_share', l.database_share::pg_catalog.float8,
         'Entries this database may hold'),
        ('sbq_lock_table_database_in_use', l.database_in_use::pg_catalog.float8,
         'Entries this database holds: message and session locks, markers of received messages')
     ) m(metric, value, help)
     WHERE m.value IS NOT NULL
    UNION ALL
    SELECT m.metric, NULL, NULL, m.value, 'gauge', m.help
      FROM sbq_queue_table() qt
     CROSS JOIN LATERAL (VALUES
        ('sbq_queue_table_capacity', qt.capacity::pg_catalog.float8,
         'Entries of the table of queues in shared memory (sbqueue.max_queues; 0 without the preload)'),
        ('sbq_queue_table_in_use', qt.in_use::pg_catalog.float8,
         'Entries in use in the whole server (shown to pg_read_all_stats only)'),
        ('sbq_queue_table_database_share', qt.database_share::pg_catalog.float8,
         'Entries this database''s queues and topics may have'),
        ('sbq_queue_table_database_in_use', qt.database_in_use::pg_catalog.float8,
         'Entries this database has; a queue past the share works without one, more slowly'),
        ('sbq_queue_table_database_deleted', qt.database_deleted::pg_catalog.float8,
         'Entries of deleted queues and topics of this database, freed once no older transaction is left')
     ) m(metric, value, help)
     WHERE m.value IS NOT NULL
    UNION ALL
    SELECT m.metric, NULL, NULL, m.value, m.type, m.help
      FROM sbq_maintenance_status() w
     CROSS JOIN LATERAL (VALUES
        ('sbq_worker_running', (w.worker_pid IS NOT NULL)::pg_catalog.int4::pg_catalog.float8, 'gauge',
         '1 while a maintenance worker is in the database'),
        ('sbq_worker_last_pass_age_seconds',
         coalesce(pg_catalog.date_part('epoch', pg_catalog.statement_timestamp()
                                                OPERATOR(pg_catalog.-) w.last_pass_started), -1),
         'gauge', 'Seconds since the last maintenance pass started (-1: none yet)'),
        ('sbq_worker_last_pass_duration_seconds',
         coalesce(pg_catalog.date_part('epoch', w.last_pass_duration), 0), 'gauge',
         'How long the last maintenance pass took'),
        ('sbq_worker_last_pass_ok', (w.last_pass_result IS NOT DISTINCT FROM 'ok')::pg_catalog.int4::pg_catalog.float8,
         'gauge', '1 when the last maintenance pass succeeded'),
        ('sbq_worker_passes_total', w.passes::pg_catalog.float8, 'counter',
         'Maintenance passes since the server started'),
        ('sbq_worker_pass_overdue_seconds',
         GREATEST(coalesce(pg_catalog.date_part('epoch', pg_catalog.statement_timestamp()
                                                           OPERATOR(pg_catalog.-) w.next_pass_due), 0), 0),
         'gauge', 'How far the next maintenance pass is past its due time')
     ) m(metric, value, type, help)
     WHERE w.database_id OPERATOR(pg_catalog.=) (SELECT d.oid FROM pg_catalog.pg_database d
                                                   WHERE d.datname OPERATOR(pg_catalog.=) pg_catalog.current_database());
