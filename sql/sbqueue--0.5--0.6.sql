/* sql/sbqueue--0.5--0.6.sql: from 0.5 to 0.6 (the maintenance status of the server) */

\echo Use "ALTER EXTENSION sbqueue UPDATE TO '0.6'" to load this file. \quit

/*
 * The maintenance workers of the whole server (src/registry.c): a row per
 * database that has sbqueue, or that the launcher has yet to look at, with
 * the worker running there, its last pass, when the next is due, and when
 * shared memory saw a lock expire or a scheduled message come due there; of
 * the databases the caller may connect to (all of them for pg_read_all_stats).
 * No rows without sbqueue in shared_preload_libraries.
 */
CREATE FUNCTION sbq_maintenance_status(
    OUT database name, OUT database_id oid, OUT state text, OUT worker_pid integer,
    OUT last_pass_started timestamptz, OUT last_pass_duration interval,
    OUT last_pass_result text, OUT passes bigint, OUT next_pass_due timestamptz,
    OUT work_due timestamptz)
    RETURNS SETOF record
    AS 'MODULE_PATHNAME', 'sbq_maintenance_status_sql'
    LANGUAGE C VOLATILE PARALLEL RESTRICTED ROWS 10;

/* the maintenance workers: of the databases the caller may connect to (src/registry.c) */
CREATE VIEW sbq_maintenance_status WITH (security_barrier) AS SELECT * FROM sbq_maintenance_status();

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
