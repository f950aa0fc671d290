/* sql/sbqueue--0.7--0.8.sql: from 0.7 to 0.8 (session locks in shared memory) */

\echo Use "ALTER EXTENSION sbqueue UPDATE TO '0.8'" to load this file. \quit

/*
 * From this update on, with the library preloaded, new session locks are
 * taken in shared memory, where 0.7 took them in the session rows. A lock
 * taken in a row by a transaction still open would not be seen by an accept
 * in shared memory (its row is not committed yet), so the update waits for
 * every transaction that changed session rows to end, and keeps new ones
 * out until it commits.
 */
LOCK TABLE sbq.sessions IN SHARE MODE;

/*
 * The expiry of the lock of the session session_key when it is kept in shared
 * memory (src/session_mem.c, 0.8 on; NULL: none there), for sbq_queue_stats.
 * Its presence tells the library that this SQL counts such locks: with older
 * SQL it keeps session locks in the rows.
 */
CREATE FUNCTION sbq.session_until(bigint) RETURNS timestamptz
    AS 'MODULE_PATHNAME', 'sbq_session_until_sql'
    LANGUAGE C VOLATILE STRICT PARALLEL SAFE;
/* as the install script grants every function the views call */
GRANT EXECUTE ON FUNCTION sbq.session_until(bigint) TO PUBLIC;

/* locked_session_count counts the session locks in shared memory too */
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
                            -- locked in a session: by the session's lock (src/session.c)
                            WHEN m.locked_until OPERATOR(pg_catalog.=) 'infinity'::pg_catalog.timestamptz
                                 AND EXISTS (SELECT FROM sbq.sessions se
                                              WHERE se.queue_id OPERATOR(pg_catalog.=) m.queue_id
                                                AND se.session_id OPERATOR(pg_catalog.=) m.session_id
                                                AND se.session_token IS NOT NULL
                                                AND se.locked_until OPERATOR(pg_catalog.>) clk.t
                                                AND se.locked_boot OPERATOR(pg_catalog.=) sbq.session_boot())
                                 THEN 'locked'
                            WHEN m.locked_until OPERATOR(pg_catalog.=) 'infinity'::pg_catalog.timestamptz
                                 AND m.state OPERATOR(pg_catalog.=) 1 THEN 'deferred'
                            WHEN m.locked_until OPERATOR(pg_catalog.=) 'infinity'::pg_catalog.timestamptz
                                 THEN 'active'
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
