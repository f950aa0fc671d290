/* sql/sbqueue--0.4--0.5.sql: from 0.4 to 0.5 (rights on queues; the calls run as the owner) */

\echo Use "ALTER EXTENSION sbqueue UPDATE TO '0.5'" to load this file. \quit

/*
 * Rights on queues (sbq_grant, sbq_revoke; src/rights.c): one row per queue
 * and role, the rights as bits (1 send, 2 listen, 4 manage). Role 0 ('-') is
 * PUBLIC. The role is a regrole so that pg_dump writes its name and a
 * restore finds the role by name.
 */
CREATE TABLE sbq.rights (
    queue_id integer NOT NULL,
    role regrole NOT NULL,
    rights smallint NOT NULL CHECK (rights > 0 AND rights < 8),
    CONSTRAINT rights_pkey PRIMARY KEY (queue_id, role)
);
/* the rights a role holds, for what keeps it from being dropped (src/rights.c) */
CREATE INDEX rights_role_idx ON sbq.rights (role);

/*
 * What DROP ROLE names when a role still holds rights: each such role has a
 * privilege dependency of this empty view (src/rights.c). Nobody is meant to
 * grant anything on it; PUBLIC may read it (it shows nothing), so that DROP
 * OWNED by a role revokes nothing here instead of failing.
 */
CREATE VIEW sbq.queue_rights WITH (security_barrier) AS SELECT NULL::regrole AS role WHERE false;
/*
 * Owned by the bootstrap superuser, whom nobody can drop or take objects
 * from: PostgreSQL drops a role's privilege dependency on an object that
 * becomes the role's own, so ownership that moved (REASSIGN OWNED) to a role
 * with rights and away again would leave it droppable.
 */
DO $$
BEGIN
    EXECUTE pg_catalog.format('ALTER VIEW sbq.queue_rights OWNER TO %I',
        (SELECT r.rolname FROM pg_catalog.pg_roles r WHERE r.oid OPERATOR(pg_catalog.=) 10));
END
$$;
SELECT pg_catalog.pg_extension_config_dump('sbq.rights', '');

/* ---------------------------------------------------------------- rights */

CREATE FUNCTION sbq_grant(entity text, role name, rights text[]) RETURNS void
    AS 'MODULE_PATHNAME', 'sbq_grant'
    LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION sbq_revoke(entity text, role name, rights text[]) RETURNS void
    AS 'MODULE_PATHNAME', 'sbq_revoke'
    LANGUAGE C VOLATILE PARALLEL UNSAFE;

/* an untyped token (literal or driver parameter) resolves to this one */
CREATE FUNCTION sbq_complete(queue text, lock_token text) RETURNS void
    AS 'MODULE_PATHNAME', 'sbq_complete_text'
    LANGUAGE C VOLATILE PARALLEL UNSAFE;

/*
 * From 0.5 on every call reaches the tables as their owner and checks the
 * caller's rights on the queue; managing a queue takes manage on it, not
 * EXECUTE. Creating queues stays with the roles granted EXECUTE on
 * sbq_create_queue. The internal functions are nobody else's.
 */
GRANT EXECUTE ON FUNCTION sbq_update_queue(text, interval, integer, interval, boolean, interval,
    boolean, text, text, integer, interval) TO PUBLIC;
GRANT EXECUTE ON FUNCTION sbq_delete_queue(text) TO PUBLIC;
GRANT EXECUTE ON FUNCTION sbq_purge_queue(text) TO PUBLIC;
REVOKE ALL ON FUNCTION sbq.lease_free(bigint, timestamptz, xid, timestamptz) FROM PUBLIC;

/* ---------------------------------------------------------------- views */

/*
 * The views show each caller the queues it holds a right on. They are security
 * barriers: a condition of the caller's query (which may call a function that
 * leaks what it sees) is applied only to the rows the view lets through.
 */
CREATE OR REPLACE VIEW sbq_queues WITH (security_barrier) AS
    SELECT q.name AS queue, q.lock_duration, q.max_delivery_count, q.default_message_ttl,
           q.dead_lettering_on_message_expiration, q.duplicate_detection_window,
           q.requires_session, q.forward_to, q.forward_dead_lettered_messages_to,
           q.max_message_size, q.created_at, q.updated_at, q.dead_letter_ttl
      FROM sbq.queues q
     WHERE pg_catalog.pg_has_role((SELECT c.relowner FROM pg_catalog.pg_class c
                                    WHERE c.oid OPERATOR(pg_catalog.=) 'sbq.queues'::pg_catalog.regclass),
                                   'USAGE')
        OR EXISTS (SELECT FROM sbq.rights r
                    WHERE r.queue_id OPERATOR(pg_catalog.=) q.queue_id
                      AND (r.role::pg_catalog.oid OPERATOR(pg_catalog.=) 0::pg_catalog.oid
                           OR pg_catalog.pg_has_role(r.role, 'USAGE')));

/*
 * The five counts split the messages without overlap, by where each row is
 * and what it holds, as sbq_peek shows them: the rows of sbq.messages are
 * scheduled (state 2, even when due: until it is activated), locked (a valid
 * lock in shared memory or in the row), deferred or active; the rows of
 * sbq.dead_letters are the dead letters. A message is counted as a dead
 * letter once it has moved, not before: one whose lock ran out on its last
 * delivery, or whose time to live has passed, is active (or deferred) until
 * a receive or maintenance moves it. Locks are judged at the start of the
 * statement (statement_timestamp()), as sbq_peek judges them, so that one
 * statement that reads both sees one instant; an uncommitted receive of
 * another session locks nothing yet. ("subqueue = 0" holds for every row
 * now; it keeps a snapshot older than the update from 0.3, which still sees
 * the dead letters there, from counting them as active.)
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
           ) pc
     WHERE pg_catalog.pg_has_role((SELECT c.relowner FROM pg_catalog.pg_class c
                                    WHERE c.oid OPERATOR(pg_catalog.=) 'sbq.queues'::pg_catalog.regclass),
                                   'USAGE')
        OR EXISTS (SELECT FROM sbq.rights r
                    WHERE r.queue_id OPERATOR(pg_catalog.=) q.queue_id
                      AND (r.role::pg_catalog.oid OPERATOR(pg_catalog.=) 0::pg_catalog.oid
                           OR pg_catalog.pg_has_role(r.role, 'USAGE')));

/*
 * Who holds which rights on which queue: the rows of the queues the caller
 * manages, and the caller's own (those of the roles whose privileges it
 * has, PUBLIC's included); every row for the extension's owner.
 */
CREATE VIEW sbq_rights WITH (security_barrier) AS
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
      JOIN sbq.queues q ON q.queue_id OPERATOR(pg_catalog.=) r.queue_id
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

/* the views show each caller what its rights let it see */
GRANT SELECT ON sbq_queues, sbq_queue_stats, sbq_rights TO PUBLIC;

/*
 * The roles that used the queues through privileges on the tables of sbq
 * (0.4's recipe) get rights in their place, on every queue there is: send
 * for INSERT on sbq.messages, listen for UPDATE on it, manage for EXECUTE
 * on sbq_update_queue, sbq_delete_queue or sbq_purge_queue together with
 * UPDATE or DELETE on sbq.messages (without which those did nothing). Their
 * privileges on schema sbq, its tables, sequences and functions go: they
 * let a role read and rewrite every queue. The update says what it did.
 */
DO $$
DECLARE
    r record;
    q record;
BEGIN
    FOR r IN
        WITH t AS (
            SELECT a.grantee, pg_catalog.bit_or(CASE a.privilege_type
                       WHEN 'INSERT' THEN 1 WHEN 'UPDATE' THEN 2 ELSE 0 END) AS bits
              FROM pg_catalog.pg_class c
             CROSS JOIN LATERAL pg_catalog.aclexplode(c.relacl) a
             WHERE c.oid OPERATOR(pg_catalog.=) 'sbq.messages'::pg_catalog.regclass
               AND a.grantee OPERATOR(pg_catalog.<>) c.relowner
             GROUP BY a.grantee),
        f AS (
            SELECT DISTINCT a.grantee, 4 AS bits
              FROM pg_catalog.pg_proc p
             CROSS JOIN LATERAL pg_catalog.aclexplode(p.proacl) a
             WHERE p.pronamespace OPERATOR(pg_catalog.=)
                       (SELECT e.extnamespace FROM pg_catalog.pg_extension e
                         WHERE e.extname OPERATOR(pg_catalog.=) 'sbqueue')
               AND p.proname IN ('sbq_update_queue', 'sbq_delete_queue', 'sbq_purge_queue')
               AND a.privilege_type OPERATOR(pg_catalog.=) 'EXECUTE'
               AND a.grantee OPERATOR(pg_catalog.<>) p.proowner
               AND a.grantee OPERATOR(pg_catalog.<>) 0
               -- which did something at 0.4 only with the rights on the tables
               AND pg_catalog.has_table_privilege(a.grantee, 'sbq.messages', 'UPDATE, DELETE'))
        SELECT g.grantee, pg_catalog.bit_or(g.bits)::pg_catalog.int2 AS bits,
               CASE WHEN g.grantee OPERATOR(pg_catalog.=) 0 THEN 'public'
                    ELSE (SELECT o.rolname FROM pg_catalog.pg_roles o
                           WHERE o.oid OPERATOR(pg_catalog.=) g.grantee) END AS name
          FROM (SELECT * FROM t UNION ALL SELECT * FROM f) g
         GROUP BY g.grantee
         ORDER BY 3
    LOOP
        IF r.bits OPERATOR(pg_catalog.<>) 0 THEN
            INSERT INTO sbq.rights (queue_id, role, rights)
                 SELECT sq.queue_id, r.grantee::pg_catalog.regrole, r.bits FROM sbq.queues sq;
            RAISE WARNING 'sbqueue 0.5 gave % the rights % on every queue, for its privileges on the tables of schema sbq',
                r.name, (SELECT pg_catalog.array_agg(v.n ORDER BY v.b)
                           FROM (VALUES (1, 'send'), (2, 'listen'), (4, 'manage')) v(b, n)
                          WHERE (r.bits OPERATOR(pg_catalog.&) v.b::pg_catalog.int2)
                                OPERATOR(pg_catalog.<>) 0::pg_catalog.int2);
        END IF;
    END LOOP;
    /*
     * Then every privilege on schema sbq and what is in it goes from every
     * role but the owner, PUBLIC included, with what was granted on from it
     * (CASCADE): on the schema, its tables, sequences and their columns, its
     * functions (but PUBLIC's EXECUTE, which the views' helpers need), and
     * the default privileges for objects made in it.
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
         ORDER BY 1
    LOOP
        EXECUTE q.cmd;
    END LOOP;
    /*
     * A role holding rights cannot be dropped: a grant of what it holds on
     * one queue (which changes nothing) records that for it.
     */
    FOR q IN
        SELECT DISTINCT ON (x.role) sq.name, o.rolname,
               ARRAY(SELECT v.n FROM (VALUES (1, 'send'), (2, 'listen'), (4, 'manage')) v(b, n)
                      WHERE (x.rights OPERATOR(pg_catalog.&) v.b::pg_catalog.int2)
                            OPERATOR(pg_catalog.<>) 0::pg_catalog.int2)::pg_catalog.text[] AS rights
          FROM sbq.rights x
          JOIN sbq.queues sq ON sq.queue_id OPERATOR(pg_catalog.=) x.queue_id
          JOIN pg_catalog.pg_roles o ON o.oid OPERATOR(pg_catalog.=) x.role::pg_catalog.oid
         ORDER BY x.role, sq.queue_id
    LOOP
        PERFORM @extschema@.sbq_grant(q.name, q.rolname, q.rights);
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
