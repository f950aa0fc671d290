/* sql/sbqueue--0.2--0.3.sql: from 0.2 to 0.3 (message locks in shared memory) */

\echo Use "ALTER EXTENSION sbqueue UPDATE TO '0.3'" to load this file. \quit

/*
 * Message locks kept in shared memory ("leases", src/lease.c): with sbqueue
 * preloaded, a peek-lock receive locks its messages there and writes nothing
 * to sbq.messages. These functions let the statements of src/storage.c and
 * the views see them; without the preload there are no leases and they say
 * so (free, a slot always taken, no lock, nothing pending).
 */
CREATE FUNCTION sbq.lease_free(bigint, timestamptz, xid, timestamptz) RETURNS boolean
    AS 'MODULE_PATHNAME', 'sbq_lease_free_sql'
    LANGUAGE C VOLATILE PARALLEL UNSAFE COST 100;
CREATE FUNCTION sbq.lease_slot(bigint) RETURNS boolean
    AS 'MODULE_PATHNAME', 'sbq_lease_slot_sql'
    LANGUAGE C VOLATILE STRICT PARALLEL UNSAFE COST 1000;
REVOKE ALL ON FUNCTION sbq.lease_slot(bigint) FROM PUBLIC;
CREATE FUNCTION sbq.lease_until(bigint) RETURNS timestamptz
    AS 'MODULE_PATHNAME', 'sbq_lease_until_sql'
    LANGUAGE C VOLATILE STRICT PARALLEL UNSAFE;
CREATE FUNCTION sbq.lease_count(bigint) RETURNS integer
    AS 'MODULE_PATHNAME', 'sbq_lease_count_sql'
    LANGUAGE C VOLATILE STRICT PARALLEL UNSAFE;
CREATE FUNCTION sbq.lease_pending_received(integer) RETURNS bigint
    AS 'MODULE_PATHNAME', 'sbq_lease_pending_sql'
    LANGUAGE C VOLATILE STRICT PARALLEL UNSAFE;

/*
 * Counts gathered in shared memory and not stored in sbq.queue_counters yet
 * (src/qstate.c), for sbq_queue_stats: an array in the column order of
 * sbq.queue_counters. The first argument is the OID of sbq.queues.
 */
CREATE FUNCTION sbq.pending_counts(oid, integer) RETURNS bigint[]
    AS 'MODULE_PATHNAME', 'sbq_pending_counts_sql'
    LANGUAGE C VOLATILE STRICT PARALLEL UNSAFE;

/* the counts and "received" see locks held in shared memory */
CREATE OR REPLACE VIEW sbq_queue_stats AS
    SELECT q.name AS queue,
           coalesce(s.active_count, 0) AS active_count,
           coalesce(s.locked_count, 0) AS locked_count,
           coalesce(s.deferred_count, 0) AS deferred_count,
           coalesce(s.scheduled_count, 0) AS scheduled_count,
           coalesce(s.dead_letter_count, 0) AS dead_letter_count,
           s.oldest_enqueued_time,
           (coalesce(c.sent, 0) OPERATOR(pg_catalog.+) pc.p[1])::bigint AS sent,
           (coalesce(c.received, 0) OPERATOR(pg_catalog.+) pc.p[2] OPERATOR(pg_catalog.+)
               sbq.lease_pending_received(q.queue_id))::bigint AS received,
           (coalesce(c.completed, 0) OPERATOR(pg_catalog.+) pc.p[3])::bigint AS completed,
           (coalesce(c.abandoned, 0) OPERATOR(pg_catalog.+) pc.p[4])::bigint AS abandoned,
           (coalesce(c.deferred, 0) OPERATOR(pg_catalog.+) pc.p[5])::bigint AS deferred,
           (coalesce(c.dead_lettered, 0) OPERATOR(pg_catalog.+) pc.p[6])::bigint AS dead_lettered,
           (coalesce(c.expired, 0) OPERATOR(pg_catalog.+) pc.p[7])::bigint AS expired
      FROM sbq.queues q
     CROSS JOIN (SELECT pg_catalog.clock_timestamp() AS t) clk
      LEFT JOIN LATERAL (
           SELECT pg_catalog.count(*) FILTER (WHERE k.kind OPERATOR(pg_catalog.=) 'active') AS active_count,
                  pg_catalog.count(*) FILTER (WHERE k.kind OPERATOR(pg_catalog.=) 'locked') AS locked_count,
                  pg_catalog.count(*) FILTER (WHERE k.kind OPERATOR(pg_catalog.=) 'deferred') AS deferred_count,
                  pg_catalog.count(*) FILTER (WHERE k.kind OPERATOR(pg_catalog.=) 'scheduled') AS scheduled_count,
                  pg_catalog.count(*) FILTER (WHERE k.kind OPERATOR(pg_catalog.=) 'dead') AS dead_letter_count,
                  pg_catalog.min(k.enqueued_time) FILTER (WHERE k.kind OPERATOR(pg_catalog.<>) 'gone'
                      AND k.kind OPERATOR(pg_catalog.<>) 'dead') AS oldest_enqueued_time
             FROM (SELECT m.enqueued_time,
                          CASE
                            WHEN m.subqueue OPERATOR(pg_catalog.=) 1 THEN 'dead'
                            WHEN m.state OPERATOR(pg_catalog.=) 2 THEN 'scheduled'
                            WHEN l.locked_until OPERATOR(pg_catalog.>) clk.t THEN 'locked'
                            WHEN l.locked_until IS NOT NULL
                                 AND l.delivery_count OPERATOR(pg_catalog.>=) q.max_delivery_count THEN 'dead'
                            WHEN m.state OPERATOR(pg_catalog.=) 1 THEN 'deferred'
                            WHEN m.expires_at OPERATOR(pg_catalog.<=) clk.t THEN
                                 CASE WHEN q.dead_lettering_on_message_expiration THEN 'dead' ELSE 'gone' END
                            ELSE 'active'
                          END AS kind
                     FROM sbq.messages m
                    CROSS JOIN LATERAL (
                          SELECT coalesce(sbq.lease_until(m.sequence_number), m.locked_until) AS locked_until,
                                 coalesce(sbq.lease_count(m.sequence_number), m.delivery_count) AS delivery_count
                         ) l
                    WHERE m.queue_id OPERATOR(pg_catalog.=) q.queue_id) k
           ) s ON true
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
           ) pc;
