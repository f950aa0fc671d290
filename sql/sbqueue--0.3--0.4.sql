/* sql/sbqueue--0.3--0.4.sql: from 0.3 to 0.4 (dead letters in a table of their own) */

\echo Use "ALTER EXTENSION sbqueue UPDATE TO '0.4'" to load this file. \quit

/*
 * Until this commits, the library works with dead letters in sbq.messages.
 * Wait for every transaction that holds or changes messages, and keep new
 * ones out, so that each dead letter moves exactly once. In the order the
 * others take their locks: readers of the views lock the view, then its
 * tables; the library's storage sections lock sbq.queues, then the others.
 */
LOCK TABLE sbq_queue_stats, sbq_queues, sbq.queues, sbq.messages IN ACCESS EXCLUSIVE MODE;

/*
 * The dead-letter sub-queues of every queue: messages moved here, in the
 * transaction that dead-lettered them, with their reason, description,
 * source (the queue's name), delivery count and the time they arrived
 * (dead_lettered_at); sbq_resubmit moves them back. Apart from the hot
 * table, they neither pin its pages nor lengthen its indexes, and keep a
 * retention and vacuum policy of their own. The columns are those of
 * sbq.messages (subqueue always 1; state 0, or 1 once deferred here), and
 * when the message arrived.
 */
CREATE TABLE sbq.dead_letters (
    LIKE sbq.messages,
    dead_lettered_at timestamptz NOT NULL,
    CONSTRAINT dead_letters_pkey PRIMARY KEY (sequence_number),
    CONSTRAINT dead_letters_subqueue_check CHECK (subqueue = 1),
    CONSTRAINT dead_letters_state_check CHECK (state IN (0, 1))
) WITH (fillfactor = 80);

CREATE INDEX dead_letters_receive_idx
    ON sbq.dead_letters (queue_id, subqueue, state, sequence_number);
/* retention (dead_letter_ttl): the oldest dead letters of a queue first */
CREATE INDEX dead_letters_age_idx ON sbq.dead_letters (queue_id, dead_lettered_at);

SELECT pg_catalog.pg_extension_config_dump('sbq.dead_letters', '');

/*
 * The functions run with their caller's rights: a role that could use the
 * dead letters in sbq.messages keeps them. pg_dump leaves out rights given
 * by an extension script (it takes them for the extension's own): after
 * restoring a dump, they must be given again, and the update says so.
 */
DO $$
DECLARE
    r record;
    given text := '';
BEGIN
    FOR r IN
        SELECT CASE WHEN a.grantee OPERATOR(pg_catalog.=) 0 THEN 'PUBLIC'
                    ELSE pg_catalog.quote_ident(g.rolname) END AS who,
               a.privilege_type, a.is_grantable
          FROM pg_catalog.pg_class c
         CROSS JOIN LATERAL pg_catalog.aclexplode(c.relacl) a
          LEFT JOIN pg_catalog.pg_roles g ON g.oid OPERATOR(pg_catalog.=) a.grantee
         WHERE c.oid OPERATOR(pg_catalog.=) 'sbq.messages'::pg_catalog.regclass
           AND a.grantee OPERATOR(pg_catalog.<>) c.relowner
         ORDER BY 1, 2
    LOOP
        EXECUTE pg_catalog.format('GRANT %s ON sbq.dead_letters TO %s%s', r.privilege_type, r.who,
                                  CASE WHEN r.is_grantable THEN ' WITH GRANT OPTION' ELSE '' END);
        given := given || CASE WHEN given = '' THEN '' ELSE ', ' END || r.privilege_type || ' to ' || r.who;
    END LOOP;
    IF given <> '' THEN
        RAISE WARNING 'sbqueue 0.4 granted on sbq.dead_letters what sbq.messages grants: %', given
            USING HINT = 'pg_dump does not keep what an extension update grants: after restoring a dump, grant it again.';
    END IF;
END
$$;

/*
 * The dead letters of 0.3 move over with every property, their locks and
 * delivery counts; 0.3 did not record when a message was dead-lettered, so
 * they get the time of this update.
 */
INSERT INTO sbq.dead_letters (sequence_number, queue_id, subqueue, state, delivery_count,
    lock_token, locked_until, enqueued_time, scheduled_enqueue_time, expires_at,
    time_to_live, message_id, session_id, correlation_id, subject, content_type, reply_to,
    reply_to_session_id, to_address, application_properties, dead_letter_reason,
    dead_letter_error_description, dead_letter_source, dead_lettered_at, body)
SELECT sequence_number, queue_id, subqueue, state, delivery_count,
       lock_token, locked_until, enqueued_time, scheduled_enqueue_time, expires_at,
       time_to_live, message_id, session_id, correlation_id, subject, content_type, reply_to,
       reply_to_session_id, to_address, application_properties, dead_letter_reason,
       dead_letter_error_description, dead_letter_source, pg_catalog.now(), body
  FROM sbq.messages
 WHERE subqueue OPERATOR(pg_catalog.=) 1;
DELETE FROM sbq.messages WHERE subqueue OPERATOR(pg_catalog.=) 1;
ALTER TABLE sbq.messages ADD CONSTRAINT messages_subqueue_check CHECK (subqueue = 0);

/*
 * Retention of dead letters (dead_letter_ttl), a queue property: a column of
 * sbq.queues and of sbq_queue_properties, and the last argument of
 * sbq_create_queue and sbq_update_queue. A function cannot gain an argument
 * in place: both are made again, so the roles granted EXECUTE on the old
 * ones must be granted again; this update names them.
 */
ALTER TABLE sbq.queues ADD COLUMN dead_letter_ttl interval;
ALTER TYPE sbq_queue_properties ADD ATTRIBUTE dead_letter_ttl interval;

DO $$
DECLARE
    r record;
BEGIN
    FOR r IN
        SELECT p.proname, CASE WHEN a.grantee OPERATOR(pg_catalog.=) 0 THEN 'PUBLIC'
                               ELSE pg_catalog.quote_ident(g.rolname) END AS who
          FROM pg_catalog.pg_proc p
         CROSS JOIN LATERAL pg_catalog.aclexplode(p.proacl) a
          LEFT JOIN pg_catalog.pg_roles g ON g.oid OPERATOR(pg_catalog.=) a.grantee
         WHERE p.oid OPERATOR(pg_catalog.=) ANY (ARRAY[
                 'sbq_create_queue(text, interval, integer, interval, boolean, interval, boolean, text, text, integer)'::pg_catalog.regprocedure,
                 'sbq_update_queue(text, interval, integer, interval, boolean, interval, boolean, text, text, integer)'::pg_catalog.regprocedure])
           AND a.grantee OPERATOR(pg_catalog.<>) p.proowner
    LOOP
        RAISE WARNING 'sbqueue 0.4 replaces %(): grant EXECUTE on it to % again', r.proname, r.who;
    END LOOP;
END
$$;

DROP FUNCTION sbq_create_queue(text, interval, integer, interval, boolean, interval, boolean,
    text, text, integer);
DROP FUNCTION sbq_update_queue(text, interval, integer, interval, boolean, interval, boolean,
    text, text, integer);

CREATE FUNCTION sbq_create_queue(
    queue text,
    lock_duration interval DEFAULT '30 seconds',
    max_delivery_count integer DEFAULT 10,
    default_message_ttl interval DEFAULT NULL,
    dead_lettering_on_message_expiration boolean DEFAULT false,
    duplicate_detection_window interval DEFAULT NULL,
    requires_session boolean DEFAULT false,
    forward_to text DEFAULT NULL,
    forward_dead_lettered_messages_to text DEFAULT NULL,
    max_message_size integer DEFAULT 1048576,
    dead_letter_ttl interval DEFAULT NULL)
    RETURNS sbq_queue_properties
    AS 'MODULE_PATHNAME', 'sbq_create_queue'
    LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION sbq_update_queue(
    queue text,
    lock_duration interval DEFAULT NULL,
    max_delivery_count integer DEFAULT NULL,
    default_message_ttl interval DEFAULT NULL,
    dead_lettering_on_message_expiration boolean DEFAULT NULL,
    duplicate_detection_window interval DEFAULT NULL,
    requires_session boolean DEFAULT NULL,
    forward_to text DEFAULT NULL,
    forward_dead_lettered_messages_to text DEFAULT NULL,
    max_message_size integer DEFAULT NULL,
    dead_letter_ttl interval DEFAULT NULL)
    RETURNS sbq_queue_properties
    AS 'MODULE_PATHNAME', 'sbq_update_queue'
    LANGUAGE C VOLATILE PARALLEL UNSAFE;

REVOKE ALL ON FUNCTION sbq_create_queue(text, interval, integer, interval, boolean, interval,
    boolean, text, text, integer, interval) FROM PUBLIC;
REVOKE ALL ON FUNCTION sbq_update_queue(text, interval, integer, interval, boolean, interval,
    boolean, text, text, integer, interval) FROM PUBLIC;

CREATE OR REPLACE VIEW sbq_queues AS
    SELECT q.name AS queue, q.lock_duration, q.max_delivery_count, q.default_message_ttl,
           q.dead_lettering_on_message_expiration, q.duplicate_detection_window,
           q.requires_session, q.forward_to, q.forward_dead_lettered_messages_to,
           q.max_message_size, q.created_at, q.updated_at, q.dead_letter_ttl
      FROM sbq.queues q;

/*
 * The counts as sbq_peek shows the messages: a message counts as a dead letter
 * once it is in sbq.dead_letters, and locks are judged at the start of the
 * statement (see the install script).
 */
CREATE OR REPLACE VIEW sbq_queue_stats AS
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
           (coalesce(c.expired, 0) OPERATOR(pg_catalog.+) pc.p[7])::bigint AS expired
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
           ) pc;
