-- describe.sql: every object of the sbqueue extension with its full definition,
-- one line each, sorted: two databases whose outputs match have the same
-- extension, whatever path (fresh install or upgrades) made it.
\pset format unaligned
\pset tuples_only on
WITH ext AS (
    SELECT oid FROM pg_extension WHERE extname = 'sbqueue'
), members AS (
    SELECT d.classid, d.objid
      FROM pg_depend d, ext
     WHERE d.refclassid = 'pg_extension'::regclass AND d.refobjid = ext.oid AND d.deptype = 'e'
)
SELECT line FROM (
    -- functions: the whole definition and who may run them (privileges in a fixed
    -- order: the order of an ACL's items means nothing)
    SELECT 'function ' || pg_get_functiondef(p.oid) || ' acl ' || coalesce((SELECT array_agg(x::text ORDER BY x::text) FROM unnest(p.proacl) x)::text, 'default') AS line
      FROM members m JOIN pg_proc p ON m.classid = 'pg_proc'::regclass AND p.oid = m.objid
    UNION ALL
    -- tables, sequences, views, types: their columns in order
    SELECT format('relation %s kind %s persistence %s options %s acl %s columns %s',
                  c.oid::regclass, c.relkind, c.relpersistence, coalesce(c.reloptions::text, ''),
                  coalesce((SELECT array_agg(x::text ORDER BY x::text) FROM unnest(c.relacl) x)::text, 'default'),
                  (SELECT string_agg(format('%s %s%s%s', a.attname, format_type(a.atttypid, a.atttypmod),
                                            CASE WHEN a.attnotnull THEN ' not null' ELSE '' END,
                                            coalesce(' default ' || pg_get_expr(ad.adbin, ad.adrelid), '')),
                                     ', ' ORDER BY a.attnum)
                     FROM pg_attribute a
                     LEFT JOIN pg_attrdef ad ON ad.adrelid = a.attrelid AND ad.adnum = a.attnum
                    WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped))
      FROM members m JOIN pg_class c ON m.classid = 'pg_class'::regclass AND c.oid = m.objid
    UNION ALL
    SELECT 'view ' || c.oid::regclass || ' ' || pg_get_viewdef(c.oid)
      FROM members m JOIN pg_class c ON m.classid = 'pg_class'::regclass AND c.oid = m.objid
     WHERE c.relkind = 'v'
    UNION ALL
    -- indexes and constraints of the extension's tables
    SELECT 'index ' || pg_get_indexdef(i.indexrelid)
      FROM members m JOIN pg_index i ON m.classid = 'pg_class'::regclass AND i.indrelid = m.objid
    UNION ALL
    SELECT format('constraint %s on %s: %s', co.conname, co.conrelid::regclass, pg_get_constraintdef(co.oid))
      FROM members m JOIN pg_constraint co ON m.classid = 'pg_class'::regclass AND co.conrelid = m.objid
    UNION ALL
    SELECT 'type ' || format_type(t.oid, NULL) || ' ' || t.typtype::text
      FROM members m JOIN pg_type t ON m.classid = 'pg_type'::regclass AND t.oid = m.objid
    UNION ALL
    SELECT 'schema ' || n.nspname || ' acl ' || coalesce(n.nspacl::text, 'default')
      FROM members m JOIN pg_namespace n ON m.classid = 'pg_namespace'::regclass AND n.oid = m.objid
    UNION ALL
    -- the tables pg_dump keeps the contents of
    SELECT 'dumped ' || cfg::regclass::text
      FROM pg_extension e, unnest(e.extconfig) AS cfg
     WHERE e.extname = 'sbqueue'
    UNION ALL
    SELECT 'version ' || extversion FROM pg_extension WHERE extname = 'sbqueue'
) objects
ORDER BY line;
