/* sql/sbqueue--0.6--0.7.sql: from 0.6 to 0.7 (sessions) */

\echo Use "ALTER EXTENSION sbqueue UPDATE TO '0.7'" to load this file. \quit

/*
 * Sessions of the queues that require them (src/session.c): one row per
 * session that has messages, state or a holder. session_key numbers the row;
 * a session token carries it (as a lock token carries its message's sequence
 * number). A session is held while session_token is set, locked_until has
 * not passed and locked_boot is sbq.session_boot(), when the running server
 * made its shared memory (a crash or a restart loses every session lock). ready_seq is set while the
 * session may have available messages and nobody holds it: accepting the
 * next session walks sessions_ready_idx, so it never meets held or emptied
 * sessions. lock_min and lock_max bound the sequence numbers the holder has
 * locked, where a release or an expiry looks for its message locks. state is
 * the session state the holder keeps (NULL: none).
 */
CREATE SEQUENCE sbq.session_seq AS bigint;
CREATE TABLE sbq.sessions (
    session_key bigint NOT NULL DEFAULT pg_catalog.nextval('sbq.session_seq'),
    queue_id integer NOT NULL,
    ready_seq bigint,
    session_token uuid,
    locked_until timestamptz,
    locked_boot timestamptz,
    lock_min bigint,
    lock_max bigint,
    last_updated timestamptz NOT NULL,
    session_id text NOT NULL,
    state bytea,
    CONSTRAINT sessions_pkey PRIMARY KEY (session_key),
    CONSTRAINT sessions_queue_session_key UNIQUE (queue_id, session_id)
);
ALTER SEQUENCE sbq.session_seq OWNED BY sbq.sessions.session_key;
CREATE INDEX sessions_ready_idx ON sbq.sessions (queue_id, ready_seq)
    WHERE ready_seq IS NOT NULL;
/*
 * held sessions by the shared memory their lock was taken in, then by expiry:
 * maintenance and accept find those whose lock ran out or was lost
 */
CREATE INDEX sessions_held_idx ON sbq.sessions (queue_id, locked_boot, locked_until)
    WHERE session_token IS NOT NULL;
/* a session's messages in sequence order, by state */
CREATE INDEX messages_session_idx ON sbq.messages (queue_id, session_id, state, sequence_number)
    WHERE session_id IS NOT NULL;
SELECT pg_catalog.pg_extension_config_dump('sbq.sessions', '');
SELECT pg_catalog.pg_extension_config_dump('sbq.session_seq', '');
/*
 * When the shared memory that session locks are valid in was made (src/shmem.c):
 * what a session lock is stamped with, for sbq_queue_stats.
 */
CREATE FUNCTION sbq.session_boot() RETURNS timestamptz
    AS 'MODULE_PATHNAME', 'sbq_session_boot_sql'
    LANGUAGE C VOLATILE PARALLEL SAFE;

/* ------------------------------------------------------------ sessions */

CREATE FUNCTION sbq_accept_session(queue text, session_id text DEFAULT NULL,
    max_wait interval DEFAULT '0')
    RETURNS TABLE(session_id text, session_token uuid, locked_until timestamptz)
    AS 'MODULE_PATHNAME', 'sbq_accept_session'
    LANGUAGE C VOLATILE PARALLEL UNSAFE ROWS 1;

CREATE FUNCTION sbq_receive_session(queue text, session_token uuid,
    max_messages integer DEFAULT 1, max_wait interval DEFAULT '0')
    RETURNS SETOF sbq_message
    AS 'MODULE_PATHNAME', 'sbq_receive_session'
    LANGUAGE C VOLATILE PARALLEL UNSAFE ROWS 10;

/* the deferred messages of a session, for its holder */
CREATE FUNCTION sbq_receive_deferred(queue text, sequence_numbers bigint[],
    session_token uuid)
    RETURNS SETOF sbq_message
    AS 'MODULE_PATHNAME', 'sbq_receive_deferred_session'
    LANGUAGE C VOLATILE PARALLEL UNSAFE ROWS 10;

CREATE FUNCTION sbq_renew_session(queue text, session_token uuid) RETURNS timestamptz
    AS 'MODULE_PATHNAME', 'sbq_renew_session'
    LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION sbq_get_session_state(queue text, session_token uuid) RETURNS bytea
    AS 'MODULE_PATHNAME', 'sbq_get_session_state'
    LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION sbq_set_session_state(queue text, session_token uuid, state bytea)
    RETURNS void
    AS 'MODULE_PATHNAME', 'sbq_set_session_state'
    LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION sbq_release_session(queue text, session_token uuid) RETURNS void
    AS 'MODULE_PATHNAME', 'sbq_release_session'
    LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION sbq_list_sessions(queue text)
    RETURNS TABLE(session_id text, has_state boolean, available_count bigint,
                  locked_until timestamptz, last_updated timestamptz)
    AS 'MODULE_PATHNAME', 'sbq_list_sessions'
    LANGUAGE C VOLATILE PARALLEL UNSAFE ROWS 100;

/* sbq_queue_stats gains the session counts of each queue (new columns last) */
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
                      WHERE se.session_token IS NOT NULL
                        AND se.locked_until OPERATOR(pg_catalog.>) clk.t
                        AND se.locked_boot OPERATOR(pg_catalog.=) sbq.session_boot()
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
 * Nobody but the owner reaches the tables: not even through the default
 * privileges of the role that installs (ALTER DEFAULT PRIVILEGES ... GRANT).
 */
DO $$
DECLARE
    q record;
BEGIN
    /*
     * Every privilege on schema sbq and what is in it goes from every role
     * but the owner, PUBLIC included: those that default privileges of the
     * installing role gave its tables, sequences, functions and schema, and
     * the default privileges for objects made in it (but PUBLIC's EXECUTE on
     * functions, which the views' helpers need).
     */
    FOR q IN
        WITH who AS (
            SELECT o.oid, CASE WHEN o.oid OPERATOR(pg_catalog.=) 0 THEN 'PUBLIC'
                               ELSE pg_catalog.quote_ident(o.rolname) END AS name
              FROM (SELECT 0::pg_catalog.oid AS oid, NULL::pg_catalog.name AS rolname
                    UNION ALL SELECT rl.oid, rl.rolname FROM pg_catalog.pg_roles rl) o)
        SELECT DISTINCT pg_catalog.format('REVOKE ALL ON TABLE %s FROM %s CASCADE',
                                          c.oid::pg_catalog.regclass, w.name) AS cmd
          FROM pg_catalog.pg_class c
         CROSS JOIN LATERAL pg_catalog.aclexplode(c.relacl) a
          JOIN who w ON w.oid OPERATOR(pg_catalog.=) a.grantee
         WHERE c.relnamespace OPERATOR(pg_catalog.=) 'sbq'::pg_catalog.regnamespace
           AND a.grantee OPERATOR(pg_catalog.<>) c.relowner
        UNION
        SELECT pg_catalog.format('REVOKE ALL (%I) ON TABLE %s FROM %s CASCADE',
                                 t.attname, c.oid::pg_catalog.regclass, w.name)
          FROM pg_catalog.pg_class c
          JOIN pg_catalog.pg_attribute t ON t.attrelid OPERATOR(pg_catalog.=) c.oid
         CROSS JOIN LATERAL pg_catalog.aclexplode(t.attacl) a
          JOIN who w ON w.oid OPERATOR(pg_catalog.=) a.grantee
         WHERE c.relnamespace OPERATOR(pg_catalog.=) 'sbq'::pg_catalog.regnamespace
           AND a.grantee OPERATOR(pg_catalog.<>) c.relowner
        UNION
        SELECT pg_catalog.format('REVOKE ALL ON FUNCTION %s FROM %s CASCADE',
                                 p.oid::pg_catalog.regprocedure, w.name)
          FROM pg_catalog.pg_proc p
         CROSS JOIN LATERAL pg_catalog.aclexplode(p.proacl) a
          JOIN who w ON w.oid OPERATOR(pg_catalog.=) a.grantee
         WHERE p.pronamespace OPERATOR(pg_catalog.=) 'sbq'::pg_catalog.regnamespace
           AND a.grantee OPERATOR(pg_catalog.<>) p.proowner
           AND a.grantee OPERATOR(pg_catalog.<>) 0
        UNION
        SELECT pg_catalog.format('REVOKE ALL ON SCHEMA sbq FROM %s CASCADE', w.name)
          FROM pg_catalog.pg_namespace n
         CROSS JOIN LATERAL pg_catalog.aclexplode(n.nspacl) a
          JOIN who w ON w.oid OPERATOR(pg_catalog.=) a.grantee
         WHERE n.nspname OPERATOR(pg_catalog.=) 'sbq'
           AND a.grantee OPERATOR(pg_catalog.<>) n.nspowner
        UNION
        SELECT pg_catalog.format('ALTER DEFAULT PRIVILEGES FOR ROLE %I IN SCHEMA sbq REVOKE ALL ON %s FROM %s CASCADE',
                                 g.rolname, CASE d.defaclobjtype WHEN 'r' THEN 'TABLES'
                                                 WHEN 'S' THEN 'SEQUENCES' WHEN 'f' THEN 'FUNCTIONS'
                                                 ELSE 'TYPES' END, w.name)
          FROM pg_catalog.pg_default_acl d
          JOIN pg_catalog.pg_roles g ON g.oid OPERATOR(pg_catalog.=) d.defaclrole
         CROSS JOIN LATERAL pg_catalog.aclexplode(d.defaclacl) a
          JOIN who w ON w.oid OPERATOR(pg_catalog.=) a.grantee
         WHERE d.defaclnamespace OPERATOR(pg_catalog.=) 'sbq'::pg_catalog.regnamespace
        UNION
        -- the functions outside schema sbq too (the views, in any schema, are
        -- done below)
        SELECT pg_catalog.format('REVOKE ALL ON FUNCTION %s FROM %s CASCADE',
                                 p.oid::pg_catalog.regprocedure, w.name)
          FROM pg_catalog.pg_depend d
          JOIN pg_catalog.pg_proc p ON p.oid OPERATOR(pg_catalog.=) d.objid
         CROSS JOIN LATERAL pg_catalog.aclexplode(p.proacl) a
          JOIN who w ON w.oid OPERATOR(pg_catalog.=) a.grantee
         WHERE d.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_proc'::pg_catalog.regclass
           AND d.refclassid OPERATOR(pg_catalog.=) 'pg_catalog.pg_extension'::pg_catalog.regclass
           AND d.deptype OPERATOR(pg_catalog.=) 'e'
           AND d.refobjid OPERATOR(pg_catalog.=)
               (SELECT e.oid FROM pg_catalog.pg_extension e WHERE e.extname OPERATOR(pg_catalog.=) 'sbqueue')
           AND a.grantee OPERATOR(pg_catalog.<>) p.proowner
           AND a.grantee OPERATOR(pg_catalog.<>) 0
         ORDER BY 1
    LOOP
        EXECUTE q.cmd;
    END LOOP;
END
$$;

/*
 * What PUBLIC may use, said here whatever the default privileges of the role
 * that installs or updates: SELECT on the views (write access through a view
 * would reach its table as the view's owner), EXECUTE on every function but
 * sbq_create_queue and sbq_maintain (the owner's to grant) and the internal
 * ones; each call checks the caller's rights itself.
 */
DO $$
DECLARE
    q record;
    g record;
BEGIN
    FOR q IN
        SELECT c.oid::pg_catalog.regclass AS rel
          FROM pg_catalog.pg_depend d
          JOIN pg_catalog.pg_class c ON c.oid OPERATOR(pg_catalog.=) d.objid
         WHERE d.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_class'::pg_catalog.regclass
           AND d.refclassid OPERATOR(pg_catalog.=) 'pg_catalog.pg_extension'::pg_catalog.regclass
           AND d.refobjid OPERATOR(pg_catalog.=)
               (SELECT e.oid FROM pg_catalog.pg_extension e WHERE e.extname OPERATOR(pg_catalog.=) 'sbqueue')
           AND d.deptype OPERATOR(pg_catalog.=) 'e' AND c.relkind OPERATOR(pg_catalog.=) 'v'
    LOOP
        -- every role's privileges on it go (with what was granted on from them), then
        -- PUBLIC may read it
        FOR g IN
            SELECT DISTINCT CASE WHEN a.grantee OPERATOR(pg_catalog.=) 0 THEN 'PUBLIC'
                                 ELSE pg_catalog.quote_ident(o.rolname) END AS name
              FROM pg_catalog.pg_class c
             CROSS JOIN LATERAL pg_catalog.aclexplode(c.relacl) a
              LEFT JOIN pg_catalog.pg_roles o ON o.oid OPERATOR(pg_catalog.=) a.grantee
             WHERE c.oid OPERATOR(pg_catalog.=) q.rel AND a.grantee OPERATOR(pg_catalog.<>) c.relowner
        LOOP
            EXECUTE pg_catalog.format('REVOKE ALL ON TABLE %s FROM %s CASCADE', q.rel, g.name);
        END LOOP;
        EXECUTE pg_catalog.format('GRANT SELECT ON TABLE %s TO PUBLIC', q.rel);
    END LOOP;
    FOR q IN
        SELECT p.oid::pg_catalog.regprocedure AS fn
          FROM pg_catalog.pg_depend d
          JOIN pg_catalog.pg_proc p ON p.oid OPERATOR(pg_catalog.=) d.objid
         WHERE d.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_proc'::pg_catalog.regclass
           AND d.refclassid OPERATOR(pg_catalog.=) 'pg_catalog.pg_extension'::pg_catalog.regclass
           AND d.refobjid OPERATOR(pg_catalog.=)
               (SELECT e.oid FROM pg_catalog.pg_extension e WHERE e.extname OPERATOR(pg_catalog.=) 'sbqueue')
           AND d.deptype OPERATOR(pg_catalog.=) 'e'
    LOOP
        IF pg_catalog.split_part(q.fn::pg_catalog.text, '(', 1) IN
               ('sbq_create_queue', 'sbq_maintain', 'sbq.new_lock_token', 'sbq.lease_slot',
                'sbq.lease_free')
           OR q.fn::pg_catalog.text LIKE '%.sbq_create_queue(%'
           OR q.fn::pg_catalog.text LIKE '%.sbq_maintain(%' THEN
            EXECUTE pg_catalog.format('REVOKE ALL ON FUNCTION %s FROM PUBLIC', q.fn);
        ELSE
            EXECUTE pg_catalog.format('GRANT EXECUTE ON FUNCTION %s TO PUBLIC', q.fn);
        END IF;
    END LOOP;
END
$$;
