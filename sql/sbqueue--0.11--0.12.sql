/* sql/sbqueue--0.11--0.12.sql: from 0.11 to 0.12 (metrics: sbq_lock_table, sbq_metrics, sbq_metrics_text; a faster sbq_queue_stats) */

\echo Use "ALTER EXTENSION sbqueue UPDATE TO '0.12'" to load this file. \quit

/* ------------------------------------------------------------ metrics (0.12) */

/*
 * sbq_queue_stats as before, but for how it tells a message in a session
 * locked: with a CASE of its own, so that a message never received
 * (locked_until NULL) no longer runs the look for its session's lock. The
 * view read a million such messages in 2.5 s, now in 0.5 s.
 */
CREATE OR REPLACE VIEW sbq_queue_stats WITH (security_barrier) AS
    SELECT q.name AS queue,
           coalesce(s.active_count, 0) AS active_count,
           coalesce(s.locked_count, 0) AS locked_count,
           coalesce(s.deferred_count, 0) AS deferred_count,
           coalesce(s.scheduled_count, 0) AS scheduled_count,
           dl.n AS dead_letter_count,
           s.oldest_enqueued_time,
           (coalesce(c.sent, 0) OPERATOR(pg_catalog.+) pc.p[1])::bigint AS sent,
           (coalesce(c.received, 0) OPERATOR(pg_catalog.+) pc.p[2] OPERATOR(pg_catalog.+)
               sbq.lease_pending_received(q.queue_id))::bigint AS received,
           (coalesce(c.completed, 0) OPERATOR(pg_catalog.+) pc.p[3])::bigint AS completed,
           (coalesce(c.abandoned, 0) OPERATOR(pg_catalog.+) pc.p[4])::bigint AS abandoned,
           (coalesce(c.deferred, 0) OPERATOR(pg_catalog.+) pc.p[5])::bigint AS deferred,
           (coalesce(c.dead_lettered, 0) OPERATOR(pg_catalog.+) pc.p[6])::bigint AS dead_lettered,
           (coalesce(c.expired, 0) OPERATOR(pg_catalog.+) pc.p[7])::bigint AS expired,
           ss.session_count,
           ss.locked_session_count
      FROM sbq.queues q
     CROSS JOIN (SELECT pg_catalog.statement_timestamp() AS t) clk
      LEFT JOIN LATERAL (
           SELECT pg_catalog.count(*) FILTER (WHERE k.kind OPERATOR(pg_catalog.=) 'active') AS active_count,
                  pg_catalog.count(*) FILTER (WHERE k.kind OPERATOR(pg_catalog.=) 'locked') AS locked_count,
                  pg_catalog.count(*) FILTER (WHERE k.kind OPERATOR(pg_catalog.=) 'deferred') AS deferred_count,
                  pg_catalog.count(*) FILTER (WHERE k.kind OPERATOR(pg_catalog.=) 'scheduled') AS scheduled_count,
                  pg_catalog.min(k.enqueued_time) AS oldest_enqueued_time
             FROM (SELECT m.enqueued_time,
                          CASE
                            WHEN m.state OPERATOR(pg_catalog.=) 2 THEN 'scheduled'
                            -- in a session: locked by the session's lock (src/session.c).
                            -- A CASE of its own, not "= 'infinity' AND EXISTS": with
                            -- locked_until NULL (never received) the AND would still
                            -- run the EXISTS, for every such message
                            WHEN m.locked_until OPERATOR(pg_catalog.=) 'infinity'::pg_catalog.timestamptz THEN
                                CASE
                                  WHEN EXISTS (SELECT FROM sbq.sessions se
                                                WHERE se.queue_id OPERATOR(pg_catalog.=) m.queue_id
                                                  AND se.session_id OPERATOR(pg_catalog.=) m.session_id
                                                  AND se.session_token IS NOT NULL
                                                  AND se.locked_until OPERATOR(pg_catalog.>) clk.t
                                                  AND se.locked_boot OPERATOR(pg_catalog.=) sbq.session_boot())
                                       THEN 'locked'
                                  WHEN m.state OPERATOR(pg_catalog.=) 1 THEN 'deferred'
                                  ELSE 'active'
                                END
                            WHEN coalesce(sbq.lease_until(m.sequence_number), m.locked_until)
                                 OPERATOR(pg_catalog.>) clk.t THEN 'locked'
                            WHEN m.state OPERATOR(pg_catalog.=) 1 THEN 'deferred'
                            ELSE 'active'
                          END AS kind
                     FROM sbq.messages m
                    WHERE m.queue_id OPERATOR(pg_catalog.=) q.queue_id
                      AND m.subqueue OPERATOR(pg_catalog.=) 0) k
           ) s ON true
     CROSS JOIN LATERAL (
           SELECT pg_catalog.count(*) AS n FROM sbq.dead_letters d
            WHERE d.queue_id OPERATOR(pg_catalog.=) q.queue_id
           ) dl
      LEFT JOIN LATERAL (
           SELECT pg_catalog.sum(qc.sent)::bigint AS sent,
                  pg_catalog.sum(qc.received)::bigint AS received,
                  pg_catalog.sum(qc.completed)::bigint AS completed,
                  pg_catalog.sum(qc.abandoned)::bigint AS abandoned,
                  pg_catalog.sum(qc.deferred)::bigint AS deferred,
                  pg_catalog.sum(qc.dead_lettered)::bigint AS dead_lettered,
                  pg_catalog.sum(qc.expired)::bigint AS expired
             FROM sbq.queue_counters qc
            WHERE qc.queue_id OPERATOR(pg_catalog.=) q.queue_id
           ) c ON true
     CROSS JOIN LATERAL (
           SELECT sbq.pending_counts('sbq.queues'::pg_catalog.regclass, q.queue_id) AS p
           ) pc
     CROSS JOIN LATERAL (
           SELECT pg_catalog.count(*) AS session_count,
                  pg_catalog.count(*) FILTER (
                      WHERE (se.session_token IS NOT NULL
                             AND se.locked_until OPERATOR(pg_catalog.>) clk.t
                             AND se.locked_boot OPERATOR(pg_catalog.=) sbq.session_boot())
                         OR sbq.session_until(se.session_key) OPERATOR(pg_catalog.>) clk.t
                  ) AS locked_session_count
             FROM sbq.sessions se
            WHERE se.queue_id OPERATOR(pg_catalog.=) q.queue_id
           ) ss
     WHERE pg_catalog.pg_has_role((SELECT c.relowner FROM pg_catalog.pg_class c
                                    WHERE c.oid OPERATOR(pg_catalog.=) 'sbq.queues'::pg_catalog.regclass),
                                   'USAGE')
        OR EXISTS (SELECT FROM sbq.rights r
                    WHERE r.queue_id OPERATOR(pg_catalog.=) q.queue_id
                      AND (r.role::pg_catalog.oid OPERATOR(pg_catalog.=) 0::pg_catalog.oid
                           OR pg_catalog.pg_has_role(r.role, 'USAGE')));


/*
 * How full the table of locks in shared memory is (src/lease.c): its
 * capacity (sbqueue.max_locks), the entries of the whole server (NULL but for
 * pg_read_all_stats), this database's share and what it holds. All 0 without
 * the preload.
 */
CREATE FUNCTION sbq_lock_table(
    OUT capacity integer, OUT in_use bigint, OUT database_share integer,
    OUT database_in_use integer)
    RETURNS record
    AS 'MODULE_PATHNAME', 'sbq_lock_table_sql'
    LANGUAGE C VOLATILE PARALLEL RESTRICTED;

/*
 * Everything a monitoring system scrapes, a sample a row, in the shape of
 * Prometheus's metrics: metric is the family's name (counters end in
 * _total), queue the queue, subscription or (for sbq_topic_*) topic the
 * sample is of, or NULL for the database's own; state the message state of
 * sbq_messages. The queue and topic rows are those of sbq_queue_stats and
 * sbq_topic_stats, so a role sees the entities it holds a right on; the lock
 * table's and the maintenance worker's rows are this database's (no worker
 * rows without the preload). Times are seconds.
 */
CREATE VIEW sbq_metrics WITH (security_barrier) AS
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

/*
 * sbq_metrics in Prometheus's text exposition format (src/metrics.c): a HELP
 * and TYPE line per family, then its samples, each labelled with the
 * database (and queue or topic, and state), read as the caller. Serve it from
 * any HTTP endpoint that runs a query.
 */
CREATE FUNCTION sbq_metrics_text() RETURNS text
    AS 'MODULE_PATHNAME', 'sbq_metrics_text_sql'
    LANGUAGE C STABLE PARALLEL RESTRICTED;

/* as the install script's last step says them: PUBLIC reads the view and calls the functions */
GRANT SELECT ON sbq_metrics TO PUBLIC;
GRANT EXECUTE ON FUNCTION sbq_lock_table(), sbq_metrics_text() TO PUBLIC;
