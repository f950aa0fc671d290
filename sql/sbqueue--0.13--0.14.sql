/* sql/sbqueue--0.13--0.14.sql: from 0.13 to 0.14 (the views and sbq_maintain() of a whole Citus cluster) */

\echo Use "ALTER EXTENSION sbqueue UPDATE TO '0.14'" to load this file. \quit

/* --------------------------------------------------------------- views */

/*
 * Each view is defined as sbq.node_<name>, the rows of this node's tables
 * (the definitions of 0.13, unchanged), and shown as sbq_<name>: with the
 * node view's definition on one server (sbq.define_views() below); with
 * the tables distributed on Citus, the node view of every shard group
 * gathered (sbq.cluster_view(), src/dist_views.c).
 */
CREATE VIEW sbq.node_queues WITH (security_barrier) AS
    SELECT q.name AS queue, q.lock_duration, q.max_delivery_count, q.default_message_ttl,
           q.dead_lettering_on_message_expiration, q.duplicate_detection_window,
           q.requires_session, q.forward_to, q.forward_dead_lettered_messages_to,
           q.max_message_size, q.created_at, q.updated_at, q.dead_letter_ttl,
           q.retry_delay, q.retry_backoff, q.max_retry_delay
      FROM sbq.queues q
     WHERE pg_catalog.pg_has_role((SELECT c.relowner FROM pg_catalog.pg_class c
                                    WHERE c.oid OPERATOR(pg_catalog.=) 'sbq.queues'::pg_catalog.regclass),
                                   'USAGE')
        OR EXISTS (SELECT FROM sbq.rights r
                    WHERE r.queue_id OPERATOR(pg_catalog.=) q.queue_id
                      AND (r.role::pg_catalog.oid OPERATOR(pg_catalog.=) 0::pg_catalog.oid
                           OR pg_catalog.pg_has_role(r.role, 'USAGE')));
CREATE OR REPLACE VIEW sbq_queues WITH (security_barrier) AS SELECT * FROM sbq.node_queues;

CREATE VIEW sbq.node_queue_stats WITH (security_barrier) AS
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
CREATE OR REPLACE VIEW sbq_queue_stats WITH (security_barrier) AS SELECT * FROM sbq.node_queue_stats;

CREATE VIEW sbq.node_rights WITH (security_barrier) AS
    SELECT q.name AS entity,
           CASE WHEN r.role::pg_catalog.oid OPERATOR(pg_catalog.=) 0::pg_catalog.oid
                THEN 'public'::pg_catalog.name
                ELSE coalesce((SELECT a.rolname FROM pg_catalog.pg_roles a
                                WHERE a.oid OPERATOR(pg_catalog.=) r.role::pg_catalog.oid),
                              r.role::pg_catalog.text::pg_catalog.name)
           END AS role,
           ARRAY(SELECT v.name FROM (VALUES (1, 'send'::pg_catalog.text), (2, 'listen'),
                                            (4, 'manage')) v(bit, name)
                  WHERE (r.rights OPERATOR(pg_catalog.&) v.bit::pg_catalog.int2)
                        OPERATOR(pg_catalog.<>) 0::pg_catalog.int2
                  ORDER BY v.bit) AS rights
      FROM sbq.rights r
      JOIN (SELECT qq.queue_id, qq.name FROM sbq.queues qq
            UNION ALL
            SELECT tt.topic_id, tt.name FROM sbq.topics tt) q
        ON q.queue_id OPERATOR(pg_catalog.=) r.queue_id
     WHERE pg_catalog.pg_has_role((SELECT c.relowner FROM pg_catalog.pg_class c
                                    WHERE c.oid OPERATOR(pg_catalog.=) 'sbq.queues'::pg_catalog.regclass),
                                   'USAGE')
        OR r.role::pg_catalog.oid OPERATOR(pg_catalog.=) 0::pg_catalog.oid
        OR pg_catalog.pg_has_role(r.role, 'USAGE')
        OR EXISTS (SELECT FROM sbq.rights m
                    WHERE m.queue_id OPERATOR(pg_catalog.=) r.queue_id
                      AND (m.rights OPERATOR(pg_catalog.&) 4::pg_catalog.int2)
                          OPERATOR(pg_catalog.<>) 0::pg_catalog.int2
                      AND (m.role::pg_catalog.oid OPERATOR(pg_catalog.=) 0::pg_catalog.oid
                           OR pg_catalog.pg_has_role(m.role, 'USAGE')));
CREATE OR REPLACE VIEW sbq_rights WITH (security_barrier) AS SELECT * FROM sbq.node_rights;

CREATE VIEW sbq.node_topics WITH (security_barrier) AS
    SELECT t.name AS topic, t.default_message_ttl, t.duplicate_detection_window,
           t.max_message_size, t.created_at, t.updated_at
      FROM sbq.topics t
     WHERE pg_catalog.pg_has_role((SELECT c.relowner FROM pg_catalog.pg_class c
                                    WHERE c.oid OPERATOR(pg_catalog.=) 'sbq.queues'::pg_catalog.regclass),
                                   'USAGE')
        OR EXISTS (SELECT FROM sbq.rights r
                    WHERE r.queue_id OPERATOR(pg_catalog.=) t.topic_id
                      AND (r.role::pg_catalog.oid OPERATOR(pg_catalog.=) 0::pg_catalog.oid
                           OR pg_catalog.pg_has_role(r.role, 'USAGE')));
CREATE OR REPLACE VIEW sbq_topics WITH (security_barrier) AS SELECT * FROM sbq.node_topics;

CREATE VIEW sbq.node_subscriptions WITH (security_barrier) AS
    SELECT t.name AS topic, s.name AS subscription, q.lock_duration, q.max_delivery_count,
           q.default_message_ttl, q.dead_lettering_on_message_expiration,
           q.duplicate_detection_window, q.requires_session, q.forward_to,
           q.forward_dead_lettered_messages_to,
           s.dead_lettering_on_filter_evaluation_exceptions, q.created_at, q.updated_at,
           q.dead_letter_ttl, q.retry_delay, q.retry_backoff, q.max_retry_delay
      FROM sbq.subscriptions s
      JOIN sbq.queues q ON q.queue_id OPERATOR(pg_catalog.=) s.queue_id
      JOIN sbq.topics t ON t.topic_id OPERATOR(pg_catalog.=) s.topic_id
     WHERE pg_catalog.pg_has_role((SELECT c.relowner FROM pg_catalog.pg_class c
                                    WHERE c.oid OPERATOR(pg_catalog.=) 'sbq.queues'::pg_catalog.regclass),
                                   'USAGE')
        OR EXISTS (SELECT FROM sbq.rights r
                    WHERE (r.queue_id OPERATOR(pg_catalog.=) s.queue_id
                           OR (r.queue_id OPERATOR(pg_catalog.=) s.topic_id
                               AND (r.rights OPERATOR(pg_catalog.&) 4::pg_catalog.int2)
                                   OPERATOR(pg_catalog.<>) 0::pg_catalog.int2))
                      AND (r.role::pg_catalog.oid OPERATOR(pg_catalog.=) 0::pg_catalog.oid
                           OR pg_catalog.pg_has_role(r.role, 'USAGE')));
CREATE OR REPLACE VIEW sbq_subscriptions WITH (security_barrier) AS SELECT * FROM sbq.node_subscriptions;

CREATE VIEW sbq.node_rules WITH (security_barrier) AS
    SELECT t.name AS topic, s.name AS subscription, u.name AS rule,
           CASE WHEN u.sql_filter IS NOT NULL THEN 'sql'::pg_catalog.text
                WHEN u.correlation_filter IS NOT NULL THEN 'correlation'::pg_catalog.text
                ELSE 'true'::pg_catalog.text END AS filter_type,
           coalesce(u.sql_filter, u.correlation_filter::pg_catalog.text, '1=1') AS filter,
           u.action, u.created_at
      FROM sbq.rules u
      JOIN sbq.subscriptions s ON s.queue_id OPERATOR(pg_catalog.=) u.queue_id
      JOIN sbq.topics t ON t.topic_id OPERATOR(pg_catalog.=) s.topic_id
     WHERE pg_catalog.pg_has_role((SELECT c.relowner FROM pg_catalog.pg_class c
                                    WHERE c.oid OPERATOR(pg_catalog.=) 'sbq.queues'::pg_catalog.regclass),
                                   'USAGE')
        OR EXISTS (SELECT FROM sbq.rights r
                    WHERE (r.queue_id OPERATOR(pg_catalog.=) s.queue_id
                           OR (r.queue_id OPERATOR(pg_catalog.=) s.topic_id
                               AND (r.rights OPERATOR(pg_catalog.&) 4::pg_catalog.int2)
                                   OPERATOR(pg_catalog.<>) 0::pg_catalog.int2))
                      AND (r.role::pg_catalog.oid OPERATOR(pg_catalog.=) 0::pg_catalog.oid
                           OR pg_catalog.pg_has_role(r.role, 'USAGE')));
CREATE OR REPLACE VIEW sbq_rules WITH (security_barrier) AS SELECT * FROM sbq.node_rules;

CREATE VIEW sbq.node_topic_stats WITH (security_barrier) AS
    SELECT t.name AS topic,
           (SELECT pg_catalog.count(*) FROM sbq.subscriptions s
             WHERE s.topic_id OPERATOR(pg_catalog.=) t.topic_id) AS subscription_count,
           (coalesce(c.sent, 0) OPERATOR(pg_catalog.+) pc.p[1])::bigint AS sent,
           coalesce(c.dropped, 0)::bigint AS dropped
      FROM sbq.topics t
      LEFT JOIN LATERAL (
           SELECT pg_catalog.sum(k.sent) AS sent, pg_catalog.sum(k.dropped) AS dropped
             FROM sbq.queue_counters k
            WHERE k.queue_id OPERATOR(pg_catalog.=) t.topic_id) c ON true
     CROSS JOIN LATERAL (
           SELECT sbq.pending_counts('sbq.queues'::pg_catalog.regclass, t.topic_id) AS p) pc
     WHERE pg_catalog.pg_has_role((SELECT c.relowner FROM pg_catalog.pg_class c
                                    WHERE c.oid OPERATOR(pg_catalog.=) 'sbq.queues'::pg_catalog.regclass),
                                   'USAGE')
        OR EXISTS (SELECT FROM sbq.rights r
                    WHERE r.queue_id OPERATOR(pg_catalog.=) t.topic_id
                      AND (r.role::pg_catalog.oid OPERATOR(pg_catalog.=) 0::pg_catalog.oid
                           OR pg_catalog.pg_has_role(r.role, 'USAGE')));
CREATE OR REPLACE VIEW sbq_topic_stats WITH (security_barrier) AS SELECT * FROM sbq.node_topic_stats;

/* ------------------------------------------------------------ the cluster's views (0.14) */

/*
 * The rows of node view sbq.node_<name> of every shard group (of this node's
 * own tables when they are not distributed), as the caller sees them: what
 * the public views are once sbq_distribute() has run (src/dist_views.c).
 */
CREATE FUNCTION sbq.cluster_view(name text) RETURNS SETOF record
    AS 'MODULE_PATHNAME', 'sbq_cluster_view'
    LANGUAGE C VOLATILE STRICT PARALLEL UNSAFE;

/*
 * What concerns one shard group rather than one entity, on the node Citus
 * delegates it to by a key of the group: node view "what" of the group, or
 * a maintenance pass over it ('maintain', for a role that may run
 * sbq_maintain()), the rows as text[]. Any role may call it, as sbq_routed.
 */
CREATE FUNCTION sbq_routed_group(key integer, what text) RETURNS SETOF text[]
    AS 'MODULE_PATHNAME', 'sbq_routed_group'
    LANGUAGE C VOLATILE STRICT PARALLEL UNSAFE;

/* the public views as the layout wants them (NULL: as the tables are now) */
CREATE FUNCTION sbq.define_views(distributed boolean) RETURNS void
    AS 'MODULE_PATHNAME', 'sbq_define_views'
    LANGUAGE C VOLATILE PARALLEL UNSAFE;

REVOKE ALL ON FUNCTION sbq.define_views(boolean) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION sbq.cluster_view(text), sbq_routed_group(integer, text) TO PUBLIC;

/* an installation distributed already gathers at once */
SELECT sbq.define_views(NULL);
