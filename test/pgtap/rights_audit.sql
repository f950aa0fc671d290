-- sbqueue pgTAP: a privilege audit of the installed extension.
--
-- Rights on queues are checked in C (rights.c), and only hold if nothing else lets a
-- role around them. This file pins, against literal lists, what a role that was
-- granted nothing (sbq_rt_nobody, made here) may do with every object of the
-- extension: which functions it may execute (every sbq_* function but
-- sbq_create_queue and sbq_maintain, and the four read-only helpers the views call;
-- not the three internal functions), which privileges it has on each table, sequence
-- and view (SELECT on the views, nothing else), and that it has no USAGE on
-- schema sbq. A new function, table or grant fails here until the lists are updated
-- on purpose. Then: no function is SECURITY DEFINER or carries settings (proconfig)
-- and each is in C (the C code switches to the owner of the tables and pins
-- search_path itself); everything belongs to the extension's owner; the views read
-- the tables as their owner, behind a security barrier; and the internal functions
-- sbq.new_lock_token, sbq.lease_slot and sbq.lease_free refuse every call from
-- outside sbqueue's own statements (42501), even granted EXECUTE and USAGE, even by
-- a superuser, also right after a call of sbqueue's has run or failed.
BEGIN;
SELECT plan(32);

CREATE ROLE sbq_rt_nobody;

-- Run sql as role r: 'ok', or 'SQLSTATE: message' of the error it raised.
CREATE FUNCTION pg_temp.try(r name, sql text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    BEGIN
        EXECUTE format('SET LOCAL ROLE %I', r);
        EXECUTE sql;
        RESET ROLE;
        RETURN 'ok';
    EXCEPTION WHEN OTHERS THEN
        RETURN SQLSTATE || ': ' || SQLERRM;
    END;
END $$;

-- The functions of the extension, as schema.name(argument types).
CREATE FUNCTION pg_temp.ext_functions() RETURNS TABLE (oid oid, sig text) LANGUAGE sql AS $$
    SELECT p.oid, n.nspname || '.' || p.proname || '(' || pg_catalog.oidvectortypes(p.proargtypes) || ')'
      FROM pg_catalog.pg_depend d
      JOIN pg_catalog.pg_proc p ON p.oid = d.objid
      JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace
     WHERE d.classid = 'pg_catalog.pg_proc'::regclass
       AND d.refclassid = 'pg_catalog.pg_extension'::regclass
       AND d.refobjid = (SELECT e.oid FROM pg_catalog.pg_extension e WHERE e.extname = 'sbqueue')
       AND d.deptype = 'e'
$$;

-- The relations (no indexes) of the extension and of schema sbq, as schema.name.
CREATE FUNCTION pg_temp.ext_relations() RETURNS TABLE (oid oid, name text, kind "char") LANGUAGE sql AS $$
    SELECT c.oid, n.nspname || '.' || c.relname, c.relkind
      FROM pg_catalog.pg_class c
      JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
     WHERE c.relkind <> 'i'
       AND (n.nspname = 'sbq'
            OR c.oid IN (SELECT d.objid FROM pg_catalog.pg_depend d
                          WHERE d.classid = 'pg_catalog.pg_class'::regclass
                            AND d.refclassid = 'pg_catalog.pg_extension'::regclass
                            AND d.refobjid = (SELECT e.oid FROM pg_catalog.pg_extension e
                                               WHERE e.extname = 'sbqueue')
                            AND d.deptype = 'e'))
$$;

-- ------------------------------------------------------------------ functions
SELECT results_eq(
    $$SELECT sig FROM pg_temp.ext_functions()
       WHERE has_function_privilege('sbq_rt_nobody', oid, 'EXECUTE') ORDER BY sig COLLATE "C"$$,
    $$VALUES
        ('public.sbq_abandon(text, text, jsonb, interval)'),
        ('public.sbq_abandon(text, uuid, jsonb, interval)'),
        ('public.sbq_abandon(text, uuid[], jsonb, interval)'),
        ('public.sbq_accept_session(text, text, interval)'),
        ('public.sbq_add_rule(text, text, text, text, jsonb, text)'),
        ('public.sbq_cancel_scheduled(text, bigint)'),
        ('public.sbq_complete(text, text)'),
        ('public.sbq_complete(text, uuid)'),
        ('public.sbq_complete(text, uuid[])'),
        ('public.sbq_create_subscription(text, text, interval, integer, interval, boolean, interval, boolean, text, text, boolean, interval, interval, boolean, interval)'),
        ('public.sbq_deadletter(text, text, text, text, jsonb)'),
        ('public.sbq_deadletter(text, uuid, text, text, jsonb)'),
        ('public.sbq_deadletter(text, uuid[], text, text, jsonb)'),
        ('public.sbq_defer(text, text, jsonb)'),
        ('public.sbq_defer(text, uuid, jsonb)'),
        ('public.sbq_defer(text, uuid[], jsonb)'),
        ('public.sbq_delete_queue(text)'),
        ('public.sbq_delete_subscription(text, text)'),
        ('public.sbq_delete_topic(text)'),
        ('public.sbq_get_queue(text)'),
        ('public.sbq_get_session_state(text, uuid)'),
        ('public.sbq_get_subscription(text, text)'),
        ('public.sbq_get_topic(text)'),
        ('public.sbq_grant(text, name, text[])'),
        ('public.sbq_list_sessions(text)'),
        ('public.sbq_lock_table()'),
        ('public.sbq_maintenance_status()'),
        ('public.sbq_metrics_text()'),
        ('public.sbq_new_message(bytea, text, text, text, text, text, text, text, text, interval, timestamp with time zone, jsonb)'),
        ('public.sbq_new_message(jsonb, text, text, text, text, text, text, text, text, interval, timestamp with time zone, jsonb)'),
        ('public.sbq_new_message(text, text, text, text, text, text, text, text, text, interval, timestamp with time zone, jsonb)'),
        ('public.sbq_peek(text, integer, bigint)'),
        ('public.sbq_purge_queue(text)'),
        -- how full the table of queues is: the server's total for pg_read_all_stats only
        ('public.sbq_queue_table()'),
        ('public.sbq_receive(text, integer, interval, text)'),
        ('public.sbq_receive_deferred(text, bigint[])'),
        ('public.sbq_receive_deferred(text, bigint[], uuid)'),
        ('public.sbq_receive_session(text, uuid, integer, interval)'),
        ('public.sbq_release_session(text, uuid)'),
        ('public.sbq_remove_rule(text, text, text)'),
        ('public.sbq_renew(text, text)'),
        ('public.sbq_renew(text, uuid)'),
        ('public.sbq_renew(text, uuid[])'),
        ('public.sbq_renew_session(text, uuid)'),
        ('public.sbq_resubmit(text, bigint[])'),
        ('public.sbq_revoke(text, name, text[])'),
        -- a routed call runs sbqueue's functions as its caller, under their checks
        ('public.sbq_routed(integer, text, text[])'),
        -- and a view or maintenance of one shard group, as its caller
        ('public.sbq_routed_group(integer, text)'),
        ('public.sbq_send(text, bytea, text, text, text, text, text, text, text, text, interval, timestamp with time zone, jsonb)'),
        ('public.sbq_send(text, jsonb, text, text, text, text, text, text, text, text, interval, timestamp with time zone, jsonb)'),
        ('public.sbq_send(text, text, text, text, text, text, text, text, text, text, interval, timestamp with time zone, jsonb)'),
        ('public.sbq_send_batch(text, bytea[], text, text, text, text, text, text, text, text, interval, timestamp with time zone, jsonb)'),
        ('public.sbq_send_batch(text, jsonb[], text, text, text, text, text, text, text, text, interval, timestamp with time zone, jsonb)'),
        ('public.sbq_send_batch(text, sbq_new_message[])'),
        ('public.sbq_send_batch(text, text[], text, text, text, text, text, text, text, text, interval, timestamp with time zone, jsonb)'),
        ('public.sbq_set_session_state(text, uuid, bytea)'),
        ('public.sbq_settle(text, uuid[], text, text, text, jsonb, interval)'),
        ('public.sbq_test_action(text, sbq_new_message)'),
        ('public.sbq_test_filter(text, sbq_new_message)'),
        ('public.sbq_update_queue(text, interval, integer, interval, boolean, interval, boolean, text, text, integer, interval, interval, boolean, interval)'),
        ('public.sbq_update_subscription(text, text, interval, integer, interval, boolean, interval, boolean, text, text, boolean, interval, interval, boolean, interval)'),
        ('public.sbq_update_topic(text, interval, interval, integer)'),
        -- read-only helpers the views call as their caller: executable by PUBLIC by
        -- design, and out of reach anyway without USAGE on schema sbq (PF4)
        ('sbq.cluster_view(text)'),
        ('sbq.entity_key(text)'),
        ('sbq.lease_count(bigint)'),
        ('sbq.lease_pending_received(integer)'),
        ('sbq.lease_until(bigint)'),
        ('sbq.pending_counts(oid, integer)'),
        ('sbq.session_boot()'),
        ('sbq.session_until(bigint)')$$,
    'PF1: a role granted nothing may execute exactly these functions of the extension');
SELECT results_eq(
    $$SELECT sig FROM pg_temp.ext_functions()
       WHERE NOT has_function_privilege('sbq_rt_nobody', oid, 'EXECUTE') ORDER BY sig COLLATE "C"$$,
    $$VALUES
        ('public.sbq_create_queue(text, interval, integer, interval, boolean, interval, boolean, text, text, integer, interval, interval, boolean, interval)'),
        ('public.sbq_create_topic(text, interval, interval, integer)'),
        ('public.sbq_distribute()'),
        ('public.sbq_maintain()'),
        ('public.sbq_undistribute()'),
        ('sbq.current_entity_key()'),
        ('sbq.define_views(boolean)'),
        ('sbq.distributed_layout(boolean)'),
        ('sbq.lease_free(bigint, timestamp with time zone, xid, timestamp with time zone)'),
        ('sbq.lease_slot(bigint)'),
        ('sbq.new_lock_token(bigint)'),
        ('sbq.next_queue_id()'),
        ('sbq.next_session_key()')$$,
    'PF2: and none of these, the rest of its functions');
SELECT is(pg_temp.try('sbq_rt_nobody', $$SELECT sbq_create_queue('pa_q')$$),
    '42501: permission denied for function sbq_create_queue', 'PF3: so it cannot create a queue');
SELECT is(pg_temp.try('sbq_rt_nobody', $$SELECT sbq_create_topic('pa_t')$$),
    '42501: permission denied for function sbq_create_topic', 'PF3b: nor a topic');
SELECT is(pg_temp.try('sbq_rt_nobody', $$SELECT sbq_maintain()$$),
    '42501: permission denied for function sbq_maintain', 'PF4: nor run a maintenance pass');
SELECT is(pg_temp.try('sbq_rt_nobody', $$SELECT sbq.lease_until(1)$$),
    '42501: permission denied for schema sbq', 'PF5: nor reach sbq.lease_until, executable as it is');
SELECT is(pg_temp.try('sbq_rt_nobody', $$SELECT sbq.pending_counts('sbq.queues'::regclass, 1)$$),
    '42501: permission denied for schema sbq', 'PF6: nor sbq.pending_counts');
SELECT is((SELECT array_agg(sig ORDER BY sig) FROM pg_temp.ext_functions() f
             JOIN pg_proc p ON p.oid = f.oid WHERE p.prosecdef),
    NULL, 'PF7: no function of the extension is SECURITY DEFINER');
SELECT is((SELECT array_agg(sig ORDER BY sig) FROM pg_temp.ext_functions() f
             JOIN pg_proc p ON p.oid = f.oid WHERE p.proconfig IS NOT NULL),
    NULL, 'PF8: no function of the extension carries settings (proconfig)');
SELECT is((SELECT array_agg(sig ORDER BY sig) FROM pg_temp.ext_functions() f
             JOIN pg_proc p ON p.oid = f.oid JOIN pg_language l ON l.oid = p.prolang WHERE l.lanname <> 'c'),
    NULL, 'PF9: every function of the extension is in C (no SQL body runs on the caller''s search_path)');
SELECT is((SELECT array_agg(sig ORDER BY sig) FROM pg_temp.ext_functions() f
             JOIN pg_proc p ON p.oid = f.oid
            WHERE p.proowner <> (SELECT extowner FROM pg_extension WHERE extname = 'sbqueue')),
    NULL, 'PF10: every function of the extension belongs to the extension''s owner');

-- ------------------------------------------------------------------ relations
SELECT results_eq(
    $$SELECT name, kind::text,
             CASE WHEN kind = 'S' THEN
                  ARRAY(SELECT p FROM unnest(ARRAY['USAGE', 'SELECT', 'UPDATE']) p
                         WHERE has_sequence_privilege('sbq_rt_nobody', oid, p))
             ELSE ARRAY(SELECT p FROM unnest(ARRAY['SELECT', 'INSERT', 'UPDATE', 'DELETE', 'TRUNCATE',
                                                   'REFERENCES', 'TRIGGER']) p
                         WHERE CASE WHEN p IN ('SELECT', 'INSERT', 'UPDATE', 'REFERENCES')
                                    THEN has_any_column_privilege('sbq_rt_nobody', oid, p)
                                    ELSE has_table_privilege('sbq_rt_nobody', oid, p) END)
             END
        FROM pg_temp.ext_relations() ORDER BY name COLLATE "C"$$,
    $$VALUES
        ('public.sbq_maintenance_status', 'v', ARRAY['SELECT']),
        ('public.sbq_metrics', 'v', ARRAY['SELECT']),
        ('public.sbq_queue_stats', 'v', ARRAY['SELECT']),
        ('public.sbq_queues', 'v', ARRAY['SELECT']),
        ('public.sbq_rights', 'v', ARRAY['SELECT']),
        ('public.sbq_rules', 'v', ARRAY['SELECT']),
        ('public.sbq_subscriptions', 'v', ARRAY['SELECT']),
        ('public.sbq_topic_stats', 'v', ARRAY['SELECT']),
        ('public.sbq_topics', 'v', ARRAY['SELECT']),
        ('sbq.dead_letters', 'r', ARRAY[]::text[]),
        ('sbq.duplicate_ids', 'r', ARRAY[]::text[]),
        ('sbq.message_seq', 'S', ARRAY[]::text[]),
        ('sbq.messages', 'r', ARRAY[]::text[]),
        ('sbq.node_queue_stats', 'v', ARRAY[]::text[]),
        ('sbq.node_queues', 'v', ARRAY[]::text[]),
        ('sbq.node_rights', 'v', ARRAY[]::text[]),
        ('sbq.node_rules', 'v', ARRAY[]::text[]),
        ('sbq.node_subscriptions', 'v', ARRAY[]::text[]),
        ('sbq.node_topic_stats', 'v', ARRAY[]::text[]),
        ('sbq.node_topics', 'v', ARRAY[]::text[]),
        ('sbq.queue_counters', 'r', ARRAY[]::text[]),
        ('sbq.queue_id_seq', 'S', ARRAY[]::text[]),
        ('sbq.queue_rights', 'v', ARRAY['SELECT']),
        ('sbq.queues', 'r', ARRAY[]::text[]),
        ('sbq.rights', 'r', ARRAY[]::text[]),
        ('sbq.rules', 'r', ARRAY[]::text[]),
        ('sbq.session_seq', 'S', ARRAY[]::text[]),
        ('sbq.sessions', 'r', ARRAY[]::text[]),
        ('sbq.subscriptions', 'r', ARRAY[]::text[]),
        ('sbq.topic_scheduled', 'r', ARRAY[]::text[]),
        ('sbq.topics', 'r', ARRAY[]::text[])$$,
    'PR1: on the tables, sequences and views of the extension a role granted nothing has SELECT on the nine views and on the empty marker view sbq.queue_rights, nothing else (not the node views, no column either)');
SELECT is((SELECT array_agg(name ORDER BY name) FROM pg_temp.ext_relations() r
            WHERE NOT EXISTS (SELECT FROM pg_depend d
                               WHERE d.classid = 'pg_class'::regclass AND d.objid = r.oid
                                 AND d.refclassid = 'pg_extension'::regclass AND d.deptype = 'e')),
    NULL, 'PR2: every relation of schema sbq belongs to the extension');
SELECT is(has_schema_privilege('sbq_rt_nobody', 'sbq', 'USAGE'), false,
    'PR3: a role granted nothing has no USAGE on schema sbq');
SELECT is(has_schema_privilege('sbq_rt_nobody', 'sbq', 'CREATE'), false,
    'PR4: nor CREATE');
SELECT is((SELECT array_agg(name ORDER BY name) FROM pg_temp.ext_relations() r JOIN pg_class c ON c.oid = r.oid
            WHERE c.relowner <> (SELECT extowner FROM pg_extension WHERE extname = 'sbqueue')
              AND c.oid <> 'sbq.queue_rights'::regclass),
    NULL, 'PR5: every table, sequence and view of the extension and of schema sbq belongs to the extension''s owner');
SELECT is((SELECT relowner FROM pg_class WHERE oid = 'sbq.queue_rights'::regclass), 10::oid,
    'PR5b: but the empty marker view sbq.queue_rights, which the bootstrap superuser owns (no ownership change can drop a dependency on it)');
SELECT is((SELECT nspowner FROM pg_namespace WHERE nspname = 'sbq'),
    (SELECT extowner FROM pg_extension WHERE extname = 'sbqueue'), 'PR6: so does schema sbq');
-- the views read the tables as their owner and filter the rows by the caller's
-- rights: a function of the caller's in a query on them must not run before that
-- filter (security_barrier), and they must not run as the caller (security_invoker)
SELECT is((SELECT array_agg(name ORDER BY name) FROM pg_temp.ext_relations() r JOIN pg_class c ON c.oid = r.oid
            WHERE r.kind = 'v'
              AND NOT coalesce((SELECT o.option_value::boolean FROM pg_options_to_table(c.reloptions) o
                                 WHERE o.option_name = 'security_barrier'), false)),
    NULL, 'PR7: every view of the extension is a security barrier');
SELECT is((SELECT array_agg(name ORDER BY name) FROM pg_temp.ext_relations() r JOIN pg_class c ON c.oid = r.oid
            WHERE r.kind = 'v'
              AND coalesce((SELECT o.option_value::boolean FROM pg_options_to_table(c.reloptions) o
                             WHERE o.option_name = 'security_invoker'), false)),
    NULL, 'PR8: no view of the extension runs as its caller (security_invoker)');

-- ------------------------------------------------------------------ internal functions
-- granted USAGE on schema sbq and EXECUTE on every one of its functions, a role
-- still cannot call the internal ones
GRANT USAGE ON SCHEMA sbq TO sbq_rt_nobody;
GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA sbq TO sbq_rt_nobody;
SELECT is(pg_temp.try('sbq_rt_nobody', 'SELECT sbq.new_lock_token(1)'),
    '42501: sbq.new_lock_token is internal to sbqueue', 'PI1: sbq.new_lock_token refuses a role granted EXECUTE');
SELECT is(pg_temp.try('sbq_rt_nobody', 'SELECT sbq.lease_slot(1)'),
    '42501: sbq.lease_slot is internal to sbqueue', 'PI2: so does sbq.lease_slot');
SELECT is(pg_temp.try('sbq_rt_nobody', $$SELECT sbq.lease_free(1, now(), '1'::xid, NULL)$$),
    '42501: sbq.lease_free is internal to sbqueue', 'PI3: so does sbq.lease_free');
SELECT is(pg_temp.try('sbq_rt_nobody', 'SELECT sbq.lease_free(NULL, NULL, NULL, NULL)'),
    '42501: sbq.lease_free is internal to sbqueue', 'PI4: so does sbq.lease_free with NULL arguments');
SELECT is(pg_temp.try('sbq_rt_nobody', 'SELECT sbq.lease_until(1)'), 'ok',
    'PI5: (the read-only helpers answer it, as they do the views)');
-- a superuser, outside sbqueue's statements, cannot either
SELECT throws_ok('SELECT sbq.new_lock_token(1)', '42501', 'sbq.new_lock_token is internal to sbqueue',
    'PI6: sbq.new_lock_token refuses a superuser');
SELECT throws_ok('SELECT sbq.lease_slot(1)', '42501', 'sbq.lease_slot is internal to sbqueue',
    'PI7: so does sbq.lease_slot');
SELECT throws_ok($$SELECT sbq.lease_free(1, now(), '1'::xid, NULL)$$, '42501', 'sbq.lease_free is internal to sbqueue',
    'PI8: so does sbq.lease_free');
-- nor right after calls of sbqueue's that ran, or failed and were caught, in this
-- transaction
DO $$ BEGIN
    PERFORM sbq_create_queue('pa_q');
    PERFORM sbq_send('pa_q', 'x');
    PERFORM sbq_complete('pa_q', lock_token) FROM sbq_receive('pa_q');
    PERFORM sbq_send('pa_q', 'y');
    PERFORM sbq_receive('pa_q');
END $$;
SELECT throws_ok($$SELECT sbq.new_lock_token(1), sbq.lease_slot(1)$$, '42501', 'sbq.new_lock_token is internal to sbqueue',
    'PI9: sbq.new_lock_token refuses a call after sends, receives and a completion');
SELECT throws_ok($$SELECT sbq.lease_free(sequence_number, now(), '1'::xid, NULL) FROM sbq_peek('pa_q')$$,
    '42501', 'sbq.lease_free is internal to sbqueue',
    'PI10: sbq.lease_free refuses a call on the rows of a peek in the same query');
CREATE FUNCTION pg_temp.after_caught() RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    res text;
BEGIN
    BEGIN
        PERFORM sbq_complete('pa_q', gen_random_uuid());
    EXCEPTION WHEN OTHERS THEN
        res := SQLSTATE;
    END;
    BEGIN
        PERFORM sbq.lease_slot(1);
        RETURN res || ' then lease_slot answered';
    EXCEPTION WHEN OTHERS THEN
        RETURN res || ' then ' || SQLSTATE || ': ' || SQLERRM;
    END;
END $$;
SELECT is(pg_temp.after_caught(), 'SB002 then 42501: sbq.lease_slot is internal to sbqueue',
    'PI11: sbq.lease_slot refuses a call right after an error inside a call of sbqueue''s was caught');
SELECT is(pg_temp.try('sbq_rt_nobody', format('SELECT sbq.lease_slot(%s)',
        (SELECT sequence_number FROM sbq_peek('pa_q')))),
    '42501: sbq.lease_slot is internal to sbqueue', 'PI12: and the role granted EXECUTE still cannot call it');

SELECT * FROM finish();
ROLLBACK;
