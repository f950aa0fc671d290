-- create: the extension installs its objects as API.md and STYLE.md say
\set VERBOSITY sqlstate

-- every user-facing function, with its identity arguments
SELECT p.proname, pg_get_function_identity_arguments(p.oid) AS args,
       pg_get_function_result(p.oid) AS result, p.proisstrict AS strict
  FROM pg_proc p JOIN pg_depend d ON d.objid = p.oid AND d.deptype = 'e'
  JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'sbqueue'
 WHERE p.proname LIKE 'sbq\_%'
 ORDER BY 1, 2;

-- internal tables live in the schema sbq, are WAL-logged and dumped by pg_dump
SELECT c.relname, c.relpersistence
  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE n.nspname = 'sbq' AND c.relkind IN ('r', 'S')
 ORDER BY 1;
SELECT unnest(extconfig)::regclass::text AS dumped FROM pg_extension WHERE extname = 'sbqueue' ORDER BY 1;

-- the types of the contract
SELECT a.attname, format_type(a.atttypid, a.atttypmod)
  FROM pg_attribute a WHERE a.attrelid = 'sbq_message'::regclass AND a.attnum > 0
 ORDER BY a.attnum;
SELECT a.attname, format_type(a.atttypid, a.atttypmod)
  FROM pg_attribute a WHERE a.attrelid = 'sbq_queue_properties'::regclass AND a.attnum > 0
 ORDER BY a.attnum;

-- creating queues and maintenance are not granted to PUBLIC; the rest checks queue rights
SELECT p.proname, has_function_privilege('public', p.oid, 'EXECUTE') AS public_can_execute
  FROM pg_proc p
 WHERE p.proname IN ('sbq_create_queue', 'sbq_update_queue', 'sbq_delete_queue', 'sbq_purge_queue',
                     'sbq_maintain')
 ORDER BY 1;
SELECT has_schema_privilege('public', 'sbq', 'USAGE') AS public_uses_sbq;

-- the settings are reserved under sbqueue.*
LOAD 'sbqueue';
SHOW sbqueue.receive_poll_interval;
SET sbqueue.no_such_setting = 1;
