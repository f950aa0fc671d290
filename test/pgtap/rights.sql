-- sbqueue pgTAP: rights on queues (sbq_grant, sbq_revoke, the sbq_rights view).
--
-- Every call on a queue checks the caller's right on it: send (sbq_send, sbq_send_batch,
-- sbq_cancel_scheduled), listen (receive, peek, the three sbq_complete, abandon, defer,
-- deadletter, renew, receive_deferred, on the queue and on its dead-letter sub-queue),
-- manage (update, purge, delete, resubmit, grant, revoke; implies the other two), any
-- of them for sbq_get_queue. This file asserts, for every entry point and each overload:
-- a role holding another right but not that one is refused with 42501 naming the queue
-- and the right, and nothing changed (pg_temp.fingerprint(), bad_input_setup.psql),
-- even when it passes a valid lock token or sequence number; a role holding exactly
-- that right succeeds. Then how rights are held: through a group role (with INHERIT,
-- until the membership is revoked), through PUBLIC, on one queue and not another, by
-- the creator of a queue; how grant and revoke change them and refuse bad arguments
-- (and in which order); what the views sbq_queues, sbq_queue_stats and sbq_rights
-- show to whom, including through a function the caller puts in the WHERE clause;
-- that a role holding rights cannot be dropped until they are revoked; that the
-- tables of schema sbq stay closed to the roles the calls serve, and a caller is
-- itself again after a call; that a batch over the size cap is refused (22023) before
-- the caller's rights are looked at, at once and at no cost.
--
-- Every role is created in this transaction (names sbq_rt_*) and goes with its
-- ROLLBACK. The assertions run as the superuser; pg_temp.try() and pg_temp.val() run
-- one statement as a role (SET LOCAL ROLE inside a subtransaction) and report how it
-- went, so a refusal never aborts the file.
BEGIN;
SELECT plan(268);

\ir bad_input_setup.psql

-- Run sql as role r: 'ok', or 'SQLSTATE: message / detail' of the error it raised.
CREATE FUNCTION pg_temp.try(r name, sql text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    st text;
    msg text;
    det text;
BEGIN
    BEGIN
        EXECUTE format('SET LOCAL ROLE %I', r);
        EXECUTE sql;
        RESET ROLE;
        RETURN 'ok';
    EXCEPTION WHEN OTHERS THEN
        GET STACKED DIAGNOSTICS st = RETURNED_SQLSTATE, msg = MESSAGE_TEXT,
                                det = PG_EXCEPTION_DETAIL;
        RETURN st || ': ' || msg || CASE WHEN det <> '' THEN ' / ' || det ELSE '' END;
    END;
END $$;

-- Run a query as role r: the first column of its first row as text, or 'ERROR
-- SQLSTATE: message'.
CREATE FUNCTION pg_temp.val(r name, sql text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    v text;
BEGIN
    BEGIN
        EXECUTE format('SET LOCAL ROLE %I', r);
        EXECUTE sql INTO v;
        RESET ROLE;
        RETURN v;
    EXCEPTION WHEN OTHERS THEN
        RETURN 'ERROR ' || SQLSTATE || ': ' || SQLERRM;
    END;
END $$;

-- A call refused for want of a right: 42501, the message naming the queue, the detail
-- the right and the role; and nothing changed. Two assertions.
CREATE FUNCTION pg_temp.denied(id text, r name, what text, sql text, queue text, needs text)
RETURNS SETOF text LANGUAGE plpgsql AS $$
DECLARE
    before text := pg_temp.fingerprint();
BEGIN
    RETURN NEXT is(pg_temp.try(r, sql),
        format('42501: permission denied for queue "%s" / The call needs the right "%s" on the queue, which role "%s" does not hold.',
               queue, needs, r),
        id || ': ' || what || ' by ' || r || ' is refused (42501, queue ' || queue || ', right ' || needs || ')');
    RETURN NEXT is(pg_temp.fingerprint(), before, id || ': nothing changed after the refused ' || what);
END $$;

-- A call that works for the role. One assertion.
CREATE FUNCTION pg_temp.works(id text, r name, what text, sql text) RETURNS text
LANGUAGE plpgsql AS $$
BEGIN
    RETURN is(pg_temp.try(r, sql), 'ok', id || ': ' || what || ' by ' || r || ' works');
END $$;

-- A function a caller may put in a query's WHERE clause: it notes every value it is
-- shown (in a setting any role may change) and lets each through. Cheap, so that the
-- planner would run it before a view's own conditions if the view let it.
CREATE FUNCTION pg_temp.leak(text) RETURNS boolean LANGUAGE plpgsql COST 0.0000001 AS $$
BEGIN
    PERFORM set_config('sbq_rt.seen', coalesce(current_setting('sbq_rt.seen', true), '') || $1 || ';', false);
    RETURN true;
END $$;
-- What a role's query through pg_temp.leak() was shown.
CREATE FUNCTION pg_temp.leaked(r name, sql text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    res text;
BEGIN
    PERFORM set_config('sbq_rt.seen', '', false);
    res := pg_temp.try(r, sql);
    IF res <> 'ok' THEN
        RETURN res;
    END IF;
    RETURN current_setting('sbq_rt.seen');
END $$;

-- ------------------------------------------------------------------ fixture
-- rt_q: send to sbq_rt_s, listen to sbq_rt_l, manage to sbq_rt_m, send and listen to
-- sbq_rt_sl; nothing to sbq_rt_n. rt_b: rights of none of them.
CREATE ROLE sbq_rt_s;
CREATE ROLE sbq_rt_l;
CREATE ROLE sbq_rt_m;
CREATE ROLE sbq_rt_sl;
CREATE ROLE sbq_rt_n;
DO $$ BEGIN
    PERFORM sbq_create_queue('rt_q');
    PERFORM sbq_create_queue('rt_b');
    PERFORM sbq_grant('rt_q', 'sbq_rt_s', ARRAY['send']);
    PERFORM sbq_grant('rt_q', 'sbq_rt_l', ARRAY['listen']);
    PERFORM sbq_grant('rt_q', 'sbq_rt_m', ARRAY['manage']);
    PERFORM sbq_grant('rt_q', 'sbq_rt_sl', ARRAY['send']);
    PERFORM sbq_grant('rt_q', 'sbq_rt_sl', ARRAY['listen']);
END $$;

-- ------------------------------------------------------------------ views
-- A superuser sees every queue and every right; a role the queues it holds a right on
-- and, in sbq_rights, its own rows, or every row of a queue it manages; a role
-- without rights nothing.
SELECT results_eq($$SELECT queue FROM sbq_queues ORDER BY queue$$,
    $$VALUES ('rt_b'::text), ('rt_q')$$,
    'V1: sbq_queues shows a superuser every queue');
SELECT is(pg_temp.val('sbq_rt_s', $$SELECT coalesce(string_agg(queue, ',' ORDER BY queue), '') FROM sbq_queues$$),
    'rt_q', 'V2: sbq_queues shows a role with a right on rt_q (none on rt_b) rt_q only');
SELECT is(pg_temp.val('sbq_rt_n', $$SELECT count(*) FROM sbq_queues$$), '0',
    'V3: sbq_queues shows a role without rights nothing');
SELECT results_eq($$SELECT queue FROM sbq_queue_stats ORDER BY queue$$,
    $$VALUES ('rt_b'::text), ('rt_q')$$,
    'V4: sbq_queue_stats shows a superuser every queue');
SELECT is(pg_temp.val('sbq_rt_l', $$SELECT coalesce(string_agg(queue, ',' ORDER BY queue), '') FROM sbq_queue_stats$$),
    'rt_q', 'V5: sbq_queue_stats shows a role with a right on rt_q (none on rt_b) rt_q only');
SELECT is(pg_temp.val('sbq_rt_n', $$SELECT count(*) FROM sbq_queue_stats$$), '0',
    'V6: sbq_queue_stats shows a role without rights nothing');
SELECT results_eq($$SELECT entity, role::text, rights FROM sbq_rights ORDER BY entity, role$$,
    $$VALUES ('rt_b', current_user::text, ARRAY['manage']),
             ('rt_q', current_user::text, ARRAY['manage']),
             ('rt_q', 'sbq_rt_l', ARRAY['listen']),
             ('rt_q', 'sbq_rt_m', ARRAY['manage']),
             ('rt_q', 'sbq_rt_s', ARRAY['send']),
             ('rt_q', 'sbq_rt_sl', ARRAY['send', 'listen'])$$,
    'V7: sbq_rights shows a superuser every right, the creator''s manage among them, two grants merged in the order send, listen, manage');
SELECT is(pg_temp.val('sbq_rt_s', $$SELECT string_agg(entity || ':' || role || ':' || rights::text, ' ' ORDER BY entity, role) FROM sbq_rights$$),
    'rt_q:sbq_rt_s:{send}', 'V8: sbq_rights shows a role without manage its own row only');
SELECT is(pg_temp.val('sbq_rt_m', $$SELECT string_agg(entity || ':' || role || ':' || rights::text, ' ' ORDER BY entity, role) FROM sbq_rights$$),
    format('rt_q:%s:{manage} rt_q:sbq_rt_l:{listen} rt_q:sbq_rt_m:{manage} rt_q:sbq_rt_s:{send} rt_q:sbq_rt_sl:{send,listen}', current_user),
    'V9: sbq_rights shows a role with manage on rt_q every row of rt_q, and none of rt_b');
SELECT is(pg_temp.val('sbq_rt_n', $$SELECT count(*) FROM sbq_rights$$), '0',
    'V10: sbq_rights shows a role without rights nothing');
-- a function in the caller's WHERE clause is shown only the rows the view shows
SELECT is(pg_temp.leaked('sbq_rt_n', $$SELECT count(*) FROM sbq_queues WHERE pg_temp.leak(queue)$$), '',
    'V11: a function in the WHERE clause of a query on sbq_queues is shown no queue the caller may not see');
SELECT is(pg_temp.leaked('sbq_rt_n', $$SELECT count(*) FROM sbq_queue_stats WHERE pg_temp.leak(queue)$$), '',
    'V12: the same for sbq_queue_stats');
SELECT is(pg_temp.leaked('sbq_rt_n', $$SELECT count(*) FROM sbq_rights WHERE pg_temp.leak(entity)$$), '',
    'V13: the same for sbq_rights (names of queues)');
SELECT is(pg_temp.leaked('sbq_rt_s', $$SELECT count(*) FROM sbq_rights WHERE pg_temp.leak(role::text)$$), 'sbq_rt_s;',
    'V14: the same for sbq_rights (names of roles): a role with send is shown its own row only');

-- ------------------------------------------------------------------ send
-- refused to a role holding listen (and to one holding nothing); sbq_rt_s sends
SELECT * FROM pg_temp.denied('S1', 'sbq_rt_l', 'sbq_send(text)',
    $$SELECT sbq_send('rt_q', 'x'::text)$$, 'rt_q', 'send');
SELECT pg_temp.works('S2', 'sbq_rt_s', 'sbq_send(text)', $$SELECT sbq_send('rt_q', 's-text'::text)$$);
SELECT * FROM pg_temp.denied('S3', 'sbq_rt_l', 'sbq_send(bytea)',
    $$SELECT sbq_send('rt_q', '\x01'::bytea)$$, 'rt_q', 'send');
SELECT pg_temp.works('S4', 'sbq_rt_s', 'sbq_send(bytea)', $$SELECT sbq_send('rt_q', '\x02'::bytea)$$);
SELECT * FROM pg_temp.denied('S5', 'sbq_rt_l', 'sbq_send(jsonb)',
    $$SELECT sbq_send('rt_q', '{"x": 1}'::jsonb)$$, 'rt_q', 'send');
SELECT pg_temp.works('S6', 'sbq_rt_s', 'sbq_send(jsonb)', $$SELECT sbq_send('rt_q', '{"s": 1}'::jsonb)$$);
SELECT * FROM pg_temp.denied('S7', 'sbq_rt_l', 'sbq_send_batch(text[])',
    $$SELECT sbq_send_batch('rt_q', ARRAY['x', 'y']::text[])$$, 'rt_q', 'send');
SELECT pg_temp.works('S8', 'sbq_rt_s', 'sbq_send_batch(text[])',
    $$SELECT sbq_send_batch('rt_q', ARRAY['s-b1', 's-b2']::text[])$$);
SELECT * FROM pg_temp.denied('S9', 'sbq_rt_l', 'sbq_send_batch(bytea[])',
    $$SELECT sbq_send_batch('rt_q', ARRAY['\x01', '\x02']::bytea[])$$, 'rt_q', 'send');
SELECT pg_temp.works('S10', 'sbq_rt_s', 'sbq_send_batch(bytea[])',
    $$SELECT sbq_send_batch('rt_q', ARRAY['\x03', '\x04']::bytea[])$$);
SELECT * FROM pg_temp.denied('S11', 'sbq_rt_l', 'sbq_send_batch(jsonb[])',
    $$SELECT sbq_send_batch('rt_q', ARRAY['1', '2']::jsonb[])$$, 'rt_q', 'send');
SELECT pg_temp.works('S12', 'sbq_rt_s', 'sbq_send_batch(jsonb[])',
    $$SELECT sbq_send_batch('rt_q', ARRAY['3', '4']::jsonb[])$$);
SELECT * FROM pg_temp.denied('S13', 'sbq_rt_n', 'sbq_send(text)',
    $$SELECT sbq_send('rt_q', 'x'::text)$$, 'rt_q', 'send');
SELECT sbq_send('rt_q', 'scheduled'::text, scheduled_enqueue_time => now() + interval '1 day') AS sched \gset
SELECT * FROM pg_temp.denied('S14', 'sbq_rt_l', 'sbq_cancel_scheduled',
    format('SELECT sbq_cancel_scheduled(%L, %s)', 'rt_q', :sched), 'rt_q', 'send');
SELECT pg_temp.works('S15', 'sbq_rt_s', 'sbq_cancel_scheduled',
    format('SELECT sbq_cancel_scheduled(%L, %s)', 'rt_q', :sched));
SELECT is((SELECT array_agg(body ORDER BY sequence_number) FROM sbq_peek('rt_q', 100)),
    ARRAY['s-text', '\x02', '{"s": 1}', 's-b1', 's-b2', '\x03', '\x04', '3', '4']::bytea[],
    'S16: the sends of sbq_rt_s are in rt_q, those refused are not, the cancelled one is gone');
SELECT is(pg_temp.val('sbq_rt_s', $$SELECT active_count || '/' || sent FROM sbq_queue_stats WHERE queue = 'rt_q'$$),
    (SELECT active_count || '/' || sent FROM sbq_queue_stats WHERE queue = 'rt_q'),
    'S17: sbq_queue_stats shows a role with send the counts of rt_q a superuser sees');

-- ------------------------------------------------------------------ listen
-- refused to a role holding send, even with a valid lock token; sbq_rt_l does each
SELECT * FROM pg_temp.denied('L1', 'sbq_rt_s', 'sbq_receive',
    $$SELECT * FROM sbq_receive('rt_q')$$, 'rt_q', 'listen');
SELECT pg_temp.val('sbq_rt_l', $$SELECT lock_token FROM sbq_receive('rt_q')$$) AS tl \gset
SELECT ok(:'tl' ~ '^[0-9a-f]{8}-', 'L2: sbq_receive by sbq_rt_l works (a lock token: ' || :'tl' || ')');
SELECT * FROM pg_temp.denied('L3', 'sbq_rt_s', 'sbq_peek',
    $$SELECT * FROM sbq_peek('rt_q')$$, 'rt_q', 'listen');
SELECT is(pg_temp.val('sbq_rt_l', $$SELECT count(*) FROM sbq_peek('rt_q', 100)$$), '9',
    'L4: sbq_peek by sbq_rt_l works (all nine messages)');
SELECT * FROM pg_temp.denied('L5', 'sbq_rt_s', 'sbq_complete(text, uuid)',
    format('SELECT sbq_complete(%L, %L::uuid)', 'rt_q', :'tl'), 'rt_q', 'listen');
SELECT pg_temp.works('L6', 'sbq_rt_l', 'sbq_complete(text, uuid) of its own lock',
    format('SELECT sbq_complete(%L, %L::uuid)', 'rt_q', :'tl'));
-- the other settlements: locks taken by the superuser (a lock token is a bearer capability)
SELECT lock_token AS t2 FROM sbq_receive('rt_q') \gset
SELECT * FROM pg_temp.denied('L7', 'sbq_rt_s', 'sbq_complete(text, text)',
    format('SELECT sbq_complete(%L, %L::text)', 'rt_q', :'t2'), 'rt_q', 'listen');
SELECT pg_temp.works('L8', 'sbq_rt_l', 'sbq_complete(text, text)',
    format('SELECT sbq_complete(%L, %L::text)', 'rt_q', :'t2'));
SELECT lock_token AS t3 FROM sbq_receive('rt_q') \gset
SELECT * FROM pg_temp.denied('L9', 'sbq_rt_s', 'sbq_complete(text, uuid[])',
    format('SELECT sbq_complete(%L, ARRAY[%L]::uuid[])', 'rt_q', :'t3'), 'rt_q', 'listen');
SELECT is(pg_temp.val('sbq_rt_l', format('SELECT sbq_complete(%L, ARRAY[%L]::uuid[])', 'rt_q', :'t3')), '1',
    'L10: sbq_complete(text, uuid[]) by sbq_rt_l works (one completed)');
SELECT lock_token AS t4 FROM sbq_receive('rt_q') \gset
SELECT * FROM pg_temp.denied('L11', 'sbq_rt_s', 'sbq_abandon',
    format('SELECT sbq_abandon(%L, %L)', 'rt_q', :'t4'), 'rt_q', 'listen');
SELECT pg_temp.works('L12', 'sbq_rt_l', 'sbq_abandon', format('SELECT sbq_abandon(%L, %L)', 'rt_q', :'t4'));
SELECT lock_token AS t5, sequence_number AS d5 FROM sbq_receive('rt_q') \gset
SELECT * FROM pg_temp.denied('L13', 'sbq_rt_s', 'sbq_defer',
    format('SELECT sbq_defer(%L, %L)', 'rt_q', :'t5'), 'rt_q', 'listen');
SELECT pg_temp.works('L14', 'sbq_rt_l', 'sbq_defer', format('SELECT sbq_defer(%L, %L)', 'rt_q', :'t5'));
SELECT lock_token AS t6 FROM sbq_receive('rt_q') \gset
SELECT * FROM pg_temp.denied('L15', 'sbq_rt_s', 'sbq_deadletter',
    format('SELECT sbq_deadletter(%L, %L)', 'rt_q', :'t6'), 'rt_q', 'listen');
SELECT pg_temp.works('L16', 'sbq_rt_l', 'sbq_deadletter', format('SELECT sbq_deadletter(%L, %L)', 'rt_q', :'t6'));
SELECT lock_token AS t7 FROM sbq_receive('rt_q') \gset
SELECT * FROM pg_temp.denied('L17', 'sbq_rt_s', 'sbq_renew',
    format('SELECT sbq_renew(%L, %L)', 'rt_q', :'t7'), 'rt_q', 'listen');
SELECT pg_temp.works('L18', 'sbq_rt_l', 'sbq_renew', format('SELECT sbq_renew(%L, %L)', 'rt_q', :'t7'));
SELECT * FROM pg_temp.denied('L19', 'sbq_rt_s', 'sbq_receive_deferred',
    format('SELECT * FROM sbq_receive_deferred(%L, ARRAY[%s]::bigint[])', 'rt_q', :d5), 'rt_q', 'listen');
SELECT is(pg_temp.val('sbq_rt_l', format('SELECT sequence_number FROM sbq_receive_deferred(%L, ARRAY[%s]::bigint[])', 'rt_q', :d5)),
    :'d5', 'L20: sbq_receive_deferred by sbq_rt_l works (the deferred message)');
SELECT * FROM pg_temp.denied('L21', 'sbq_rt_s', 'sbq_receive in receive_and_delete mode',
    $$SELECT * FROM sbq_receive('rt_q', 1, '0', 'receive_and_delete')$$, 'rt_q', 'listen');
SELECT * FROM pg_temp.denied('L22', 'sbq_rt_n', 'sbq_receive',
    $$SELECT * FROM sbq_receive('rt_q')$$, 'rt_q', 'listen');

-- the dead-letter sub-queue: the rights on rt_q cover it
SELECT * FROM pg_temp.denied('DL1', 'sbq_rt_s', 'sbq_receive of the dead-letter sub-queue',
    $$SELECT * FROM sbq_receive('rt_q/$deadletterqueue')$$, 'rt_q', 'listen');
SELECT * FROM pg_temp.denied('DL2', 'sbq_rt_s', 'sbq_peek of the dead-letter sub-queue',
    $$SELECT * FROM sbq_peek('rt_q/$DeadLetterQueue')$$, 'rt_q', 'listen');
SELECT is(pg_temp.val('sbq_rt_l', $$SELECT count(*) FROM sbq_peek('rt_q/$deadletterqueue')$$), '1',
    'DL3: sbq_peek of the dead-letter sub-queue by sbq_rt_l (listen on rt_q) works');
SELECT pg_temp.val('sbq_rt_l', $$SELECT lock_token FROM sbq_receive('rt_q/$deadletterqueue')$$) AS tdl \gset
SELECT ok(:'tdl' ~ '^[0-9a-f]{8}-', 'DL4: sbq_receive of the dead-letter sub-queue by sbq_rt_l works: ' || :'tdl');
SELECT * FROM pg_temp.denied('DL5', 'sbq_rt_s', 'sbq_complete of a dead letter',
    format('SELECT sbq_complete(%L, %L::uuid)', 'rt_q/$deadletterqueue', :'tdl'), 'rt_q', 'listen');
SELECT pg_temp.works('DL6', 'sbq_rt_l', 'sbq_complete of a dead letter',
    format('SELECT sbq_complete(%L, %L::uuid)', 'rt_q/$deadletterqueue', :'tdl'));
SELECT is((SELECT count(*) FROM sbq.dead_letters), 0::bigint, 'DL7: the dead letter is gone');

-- ------------------------------------------------------------------ manage
-- refused to a role holding send and listen; sbq_rt_m does each
DO $$ BEGIN PERFORM sbq_deadletter('rt_q', lock_token) FROM sbq_receive('rt_q'); END $$;
SELECT * FROM pg_temp.denied('M1', 'sbq_rt_sl', 'sbq_update_queue',
    $$SELECT sbq_update_queue('rt_q', lock_duration => '45 seconds')$$, 'rt_q', 'manage');
SELECT pg_temp.works('M2', 'sbq_rt_m', 'sbq_update_queue',
    $$SELECT sbq_update_queue('rt_q', lock_duration => '45 seconds')$$);
SELECT is((SELECT lock_duration FROM sbq_get_queue('rt_q')), interval '45 seconds',
    'M3: the update of sbq_rt_m took effect');
SELECT * FROM pg_temp.denied('M4', 'sbq_rt_sl', 'sbq_resubmit',
    $$SELECT sbq_resubmit('rt_q')$$, 'rt_q', 'manage');
SELECT is(pg_temp.val('sbq_rt_m', $$SELECT sbq_resubmit('rt_q')$$), '1',
    'M5: sbq_resubmit by sbq_rt_m works (one dead letter back)');
DO $$ BEGIN PERFORM sbq_deadletter('rt_q', lock_token) FROM sbq_receive('rt_q'); END $$;
SELECT * FROM pg_temp.denied('M6', 'sbq_rt_sl', 'sbq_purge_queue of the dead-letter sub-queue',
    $$SELECT sbq_purge_queue('rt_q/$deadletterqueue')$$, 'rt_q', 'manage');
SELECT is(pg_temp.val('sbq_rt_m', $$SELECT sbq_purge_queue('rt_q/$deadletterqueue')$$), '1',
    'M7: sbq_purge_queue of the dead-letter sub-queue by sbq_rt_m works');
SELECT * FROM pg_temp.denied('M8', 'sbq_rt_sl', 'sbq_purge_queue',
    $$SELECT sbq_purge_queue('rt_q')$$, 'rt_q', 'manage');
SELECT is(pg_temp.val('sbq_rt_m', $$SELECT sbq_purge_queue('rt_q')$$), '4',
    'M9: sbq_purge_queue by sbq_rt_m works (the four messages left)');
SELECT * FROM pg_temp.denied('M10', 'sbq_rt_sl', 'sbq_grant (of manage to itself)',
    $$SELECT sbq_grant('rt_q', 'sbq_rt_sl', ARRAY['manage'])$$, 'rt_q', 'manage');
SELECT pg_temp.works('M11', 'sbq_rt_m', 'sbq_grant', $$SELECT sbq_grant('rt_q', 'sbq_rt_n', ARRAY['send'])$$);
SELECT pg_temp.works('M12', 'sbq_rt_n', 'sbq_send (granted by sbq_rt_m)', $$SELECT sbq_send('rt_q', 'n')$$);
SELECT * FROM pg_temp.denied('M13', 'sbq_rt_sl', 'sbq_revoke (of another role''s manage)',
    $$SELECT sbq_revoke('rt_q', 'sbq_rt_m', ARRAY['manage'])$$, 'rt_q', 'manage');
SELECT pg_temp.works('M14', 'sbq_rt_m', 'sbq_revoke', $$SELECT sbq_revoke('rt_q', 'sbq_rt_n', ARRAY['send'])$$);
SELECT * FROM pg_temp.denied('M15', 'sbq_rt_n', 'sbq_send (after the revoke)',
    $$SELECT sbq_send('rt_q', 'n')$$, 'rt_q', 'send');
DO $$ BEGIN
    PERFORM sbq_create_queue('rt_del');
    PERFORM sbq_grant('rt_del', 'sbq_rt_m', ARRAY['manage']);
    PERFORM sbq_grant('rt_del', 'sbq_rt_sl', ARRAY['send', 'listen']);
    PERFORM sbq_send('rt_del', 'd');
END $$;
SELECT * FROM pg_temp.denied('M16', 'sbq_rt_sl', 'sbq_delete_queue',
    $$SELECT sbq_delete_queue('rt_del')$$, 'rt_del', 'manage');
SELECT pg_temp.works('M17', 'sbq_rt_m', 'sbq_delete_queue', $$SELECT sbq_delete_queue('rt_del')$$);
SELECT is((SELECT count(*) FROM sbq.rights r WHERE NOT EXISTS (SELECT FROM sbq.queues q WHERE q.queue_id = r.queue_id)),
    0::bigint, 'M18: the rights on the deleted queue went with it');
-- a queue made again under the name of a deleted one has none of its rights
DO $$ BEGIN PERFORM sbq_create_queue('rt_del'); END $$;
SELECT * FROM pg_temp.denied('M19', 'sbq_rt_m', 'sbq_purge_queue of a queue made again under the deleted one''s name',
    $$SELECT sbq_purge_queue('rt_del')$$, 'rt_del', 'manage');

-- sbq_get_queue: any right
SELECT * FROM pg_temp.denied('G1', 'sbq_rt_n', 'sbq_get_queue',
    $$SELECT sbq_get_queue('rt_q')$$, 'rt_q', 'send, listen or manage');
SELECT pg_temp.works('G2', 'sbq_rt_s', 'sbq_get_queue (send)', $$SELECT sbq_get_queue('rt_q')$$);
SELECT pg_temp.works('G3', 'sbq_rt_l', 'sbq_get_queue (listen)', $$SELECT sbq_get_queue('rt_q')$$);
SELECT pg_temp.works('G4', 'sbq_rt_m', 'sbq_get_queue (manage)', $$SELECT sbq_get_queue('rt_q')$$);
SELECT pg_temp.works('G5', 'sbq_rt_l', 'sbq_get_queue of the dead-letter sub-queue',
    $$SELECT sbq_get_queue('rt_q/$deadletterqueue')$$);
SELECT * FROM pg_temp.denied('G6', 'sbq_rt_n', 'sbq_get_queue of the dead-letter sub-queue',
    $$SELECT sbq_get_queue('rt_q/$deadletterqueue')$$, 'rt_q', 'send, listen or manage');

-- ------------------------------------------------------------------ manage implies send and listen
SELECT sbq_send('rt_q', 'scheduled'::text, scheduled_enqueue_time => now() + interval '1 day') AS sched2 \gset
SELECT pg_temp.works('I1', 'sbq_rt_m', 'sbq_send (manage)', $$SELECT sbq_send('rt_q', 'm')$$);
SELECT pg_temp.works('I2', 'sbq_rt_m', 'sbq_send_batch (manage)', $$SELECT sbq_send_batch('rt_q', ARRAY['m1', 'm2'])$$);
SELECT pg_temp.works('I3', 'sbq_rt_m', 'sbq_cancel_scheduled (manage)',
    format('SELECT sbq_cancel_scheduled(%L, %s)', 'rt_q', :sched2));
SELECT is(pg_temp.val('sbq_rt_m', $$SELECT count(*) FROM sbq_peek('rt_q', 10)$$), '4',
    'I4: sbq_peek (manage) works');
SELECT pg_temp.val('sbq_rt_m', $$SELECT lock_token FROM sbq_receive('rt_q')$$) AS tm \gset
SELECT ok(:'tm' ~ '^[0-9a-f]{8}-', 'I5: sbq_receive (manage) works: ' || :'tm');
SELECT pg_temp.works('I6', 'sbq_rt_m', 'sbq_complete (manage)', format('SELECT sbq_complete(%L, %L::uuid)', 'rt_q', :'tm'));
SELECT pg_temp.works('I7', 'sbq_rt_m', 'sbq_peek of the dead-letter sub-queue (manage)',
    $$SELECT sbq_peek('rt_q/$deadletterqueue')$$);

-- ------------------------------------------------------------------ group roles
-- a right held by a group role works for a member that inherits, not for one that
-- does not, and stops when the membership is revoked
CREATE ROLE sbq_rt_grp;
CREATE ROLE sbq_rt_member;
CREATE ROLE sbq_rt_noinherit NOINHERIT;
GRANT sbq_rt_grp TO sbq_rt_member, sbq_rt_noinherit;
DO $$ BEGIN PERFORM sbq_grant('rt_q', 'sbq_rt_grp', ARRAY['listen']); END $$;
SELECT is(pg_temp.val('sbq_rt_member', $$SELECT count(*) FROM sbq_peek('rt_q', 10)$$), '3',
    'R1: a member of a group role with listen peeks');
SELECT is(pg_temp.val('sbq_rt_member', $$SELECT string_agg(entity || ':' || role || ':' || rights::text, ' ') FROM sbq_rights$$),
    'rt_q:sbq_rt_grp:{listen}', 'R2: sbq_rights shows the member the group''s row');
SELECT is(pg_temp.val('sbq_rt_member', $$SELECT string_agg(queue, ',') FROM sbq_queues$$), 'rt_q',
    'R3: sbq_queues shows the member the group''s queue');
SELECT * FROM pg_temp.denied('R4', 'sbq_rt_member', 'sbq_send (the group holds listen only)',
    $$SELECT sbq_send('rt_q', 'g')$$, 'rt_q', 'send');
SELECT * FROM pg_temp.denied('R5', 'sbq_rt_noinherit', 'sbq_peek (member without INHERIT)',
    $$SELECT * FROM sbq_peek('rt_q')$$, 'rt_q', 'listen');
SELECT is(pg_temp.val('sbq_rt_noinherit', $$SELECT count(*) FROM sbq_queues$$), '0',
    'R6: sbq_queues shows a member without INHERIT nothing');
REVOKE sbq_rt_grp FROM sbq_rt_member;
SELECT * FROM pg_temp.denied('R7', 'sbq_rt_member', 'sbq_peek (membership revoked)',
    $$SELECT * FROM sbq_peek('rt_q')$$, 'rt_q', 'listen');
SELECT is(pg_temp.val('sbq_rt_member', $$SELECT count(*) FROM sbq_rights$$), '0',
    'R8: sbq_rights shows the former member nothing');

-- ------------------------------------------------------------------ PUBLIC
-- a right granted to public holds for every role, a fresh one too, and for no other right
DO $$ BEGIN
    PERFORM sbq_create_queue('rt_pub');
    PERFORM sbq_grant('rt_pub', 'public', ARRAY['send']);
END $$;
CREATE ROLE sbq_rt_fresh;
SELECT pg_temp.works('P1', 'sbq_rt_n', 'sbq_send to a queue where public holds send', $$SELECT sbq_send('rt_pub', 'p')$$);
SELECT pg_temp.works('P2', 'sbq_rt_fresh', 'sbq_send to a queue where public holds send', $$SELECT sbq_send('rt_pub', 'p')$$);
SELECT * FROM pg_temp.denied('P3', 'sbq_rt_fresh', 'sbq_peek (public holds send only)',
    $$SELECT * FROM sbq_peek('rt_pub')$$, 'rt_pub', 'listen');
SELECT is(pg_temp.val('sbq_rt_fresh', $$SELECT string_agg(queue, ',') FROM sbq_queues$$), 'rt_pub',
    'P4: sbq_queues shows any role the queue public holds a right on');
SELECT is(pg_temp.val('sbq_rt_fresh', $$SELECT string_agg(entity || ':' || role || ':' || rights::text, ' ') FROM sbq_rights$$),
    'rt_pub:public:{send}', 'P5: sbq_rights shows any role the public row');
SELECT * FROM pg_temp.denied('P6', 'sbq_rt_fresh', 'sbq_grant on rt_pub (public holds send only)',
    $$SELECT sbq_grant('rt_pub', 'sbq_rt_fresh', ARRAY['listen'])$$, 'rt_pub', 'manage');
DO $$ BEGIN PERFORM sbq_revoke('rt_pub', 'public', ARRAY['send']); END $$;
SELECT * FROM pg_temp.denied('P7', 'sbq_rt_fresh', 'sbq_send (public''s send revoked)',
    $$SELECT sbq_send('rt_pub', 'p')$$, 'rt_pub', 'send');

-- ------------------------------------------------------------------ one queue, not another
DO $$ BEGIN PERFORM sbq_send('rt_b', 'b'::text); END $$;
SELECT lock_token AS tb FROM sbq_receive('rt_b') \gset
SELECT * FROM pg_temp.denied('Q1', 'sbq_rt_l', 'sbq_receive on rt_b (listen on rt_q)',
    $$SELECT * FROM sbq_receive('rt_b')$$, 'rt_b', 'listen');
SELECT * FROM pg_temp.denied('Q2', 'sbq_rt_l', 'sbq_complete on rt_b with a valid token (listen on rt_q)',
    format('SELECT sbq_complete(%L, %L::uuid)', 'rt_b', :'tb'), 'rt_b', 'listen');
SELECT * FROM pg_temp.denied('Q3', 'sbq_rt_s', 'sbq_send to rt_b (send on rt_q)',
    $$SELECT sbq_send('rt_b', 'x')$$, 'rt_b', 'send');
SELECT * FROM pg_temp.denied('Q4', 'sbq_rt_m', 'sbq_purge_queue of rt_b (manage on rt_q)',
    $$SELECT sbq_purge_queue('rt_b')$$, 'rt_b', 'manage');
SELECT * FROM pg_temp.denied('Q5', 'sbq_rt_m', 'sbq_grant on rt_b to itself (manage on rt_q)',
    $$SELECT sbq_grant('rt_b', 'sbq_rt_m', ARRAY['listen'])$$, 'rt_b', 'manage');
-- rt_b's lock token named with rt_q, where the role may listen: the lock is not rt_q's
SELECT * FROM pg_temp.bad('Q6', 'sbq_complete on rt_q of a lock token of rt_b (as superuser, the check of the token)',
    format('SELECT sbq_complete(%L, %L::uuid)', 'rt_q', :'tb'), 'SB002');
SELECT is(split_part(pg_temp.try('sbq_rt_l', format('SELECT sbq_complete(%L, %L::uuid)', 'rt_q', :'tb')), ':', 1),
    'SB002', 'Q7: sbq_rt_l settling rt_b''s lock token through rt_q gets SB002 (lock lost)');
SELECT is(split_part(pg_temp.try('sbq_rt_l', format('SELECT sbq_deadletter(%L, %L::uuid)', 'rt_q', :'tb')), ':', 1),
    'SB002', 'Q8: the same for sbq_deadletter');
SELECT is((SELECT count(*) FROM sbq_peek('rt_b')), 1::bigint, 'Q9: rt_b''s message is still there');

-- ------------------------------------------------------------------ the creator of a queue
CREATE ROLE sbq_rt_creator;
SELECT is(pg_temp.try('sbq_rt_creator', $$SELECT sbq_create_queue('rt_c')$$),
    '42501: permission denied for function sbq_create_queue',
    'C1: a role without EXECUTE on sbq_create_queue cannot create a queue');
GRANT EXECUTE ON FUNCTION sbq_create_queue(text, interval, integer, interval, boolean, interval,
    boolean, text, text, integer, interval, interval, boolean, interval) TO sbq_rt_creator;
SELECT pg_temp.works('C2', 'sbq_rt_creator', 'sbq_create_queue (EXECUTE granted)', $$SELECT sbq_create_queue('rt_c')$$);
SELECT is((SELECT string_agg(role || ':' || rights::text, ' ') FROM sbq_rights WHERE entity = 'rt_c'),
    'sbq_rt_creator:{manage}', 'C3: the creator holds manage on its queue, and nobody else a right');
SELECT pg_temp.works('C4', 'sbq_rt_creator', 'sbq_send to its queue', $$SELECT sbq_send('rt_c', 'c')$$);
SELECT is(pg_temp.val('sbq_rt_creator', $$SELECT body FROM sbq_receive('rt_c', 1, '0', 'receive_and_delete')$$),
    '\x63', 'C5: the creator receives from its queue');
SELECT pg_temp.works('C6', 'sbq_rt_creator', 'sbq_grant of send', $$SELECT sbq_grant('rt_c', 'sbq_rt_s', ARRAY['send'])$$);
SELECT pg_temp.works('C7', 'sbq_rt_s', 'sbq_send to rt_c (granted by the creator)', $$SELECT sbq_send('rt_c', 's')$$);
SELECT * FROM pg_temp.denied('C8', 'sbq_rt_s', 'sbq_grant on rt_c (send only)',
    $$SELECT sbq_grant('rt_c', 'sbq_rt_n', ARRAY['send'])$$, 'rt_c', 'manage');
SELECT * FROM pg_temp.denied('C9', 'sbq_rt_s', 'sbq_revoke of the creator''s manage (send only)',
    $$SELECT sbq_revoke('rt_c', 'sbq_rt_creator', ARRAY['manage'])$$, 'rt_c', 'manage');
SELECT is(pg_temp.try('sbq_rt_s', $$SELECT sbq_create_queue('rt_c2')$$),
    '42501: permission denied for function sbq_create_queue',
    'C10: holding rights on a queue does not let a role create one');

-- ------------------------------------------------------------------ a forward left pointing at a name
-- A queue or subscription whose destination was deleted dead-letters what it
-- forwards; made again, the destination would receive it. So a role may make a
-- queue or topic of that name only if it manages the forwarding entity too, as
-- setting forward_to needs (before: any role that may create queues made it,
-- and read what was sent to the other's queue).
SELECT sbq_create_queue('rt_fdst'), sbq_create_queue('rt_fdst2'), sbq_create_queue('rt_fdst3');
SELECT sbq_create_queue('rt_fsrc', forward_to => 'RT_Fdst');
SELECT sbq_create_queue('rt_fdl', forward_dead_lettered_messages_to => 'rt_fdst2');
SELECT sbq_create_queue('rt_fown', forward_to => 'rt_fdst3');
SELECT sbq_delete_queue('rt_fdst'), sbq_delete_queue('rt_fdst2'), sbq_delete_queue('rt_fdst3');
SELECT sbq_grant('rt_fown', 'sbq_rt_creator', ARRAY['manage']);
GRANT EXECUTE ON FUNCTION sbq_create_topic(text, interval, interval, integer) TO sbq_rt_creator;
SELECT is(pg_temp.try('sbq_rt_creator', $$SELECT sbq_create_queue('rt_fdst')$$),
    '42501: permission denied to create "rt_fdst" / An entity the role does not manage forwards to that name: made, it would receive what that entity forwards, which needs the right "manage" on both.',
    'F1: a role cannot make a queue under the name another''s queue still forwards to, nor learn that queue''s name');
SELECT is(split_part(pg_temp.try('sbq_rt_creator', $$SELECT sbq_create_topic('Rt_FDST')$$), ':', 1), '42501',
    'F2: nor a topic under it, in any letter case');
SELECT is(split_part(pg_temp.try('sbq_rt_creator', $$SELECT sbq_create_queue('rt_fdst2')$$), ':', 1), '42501',
    'F3: nor a queue under the name another''s dead letters are forwarded to');
SELECT sbq_send('rt_fsrc', 'kept');
SELECT is((SELECT dead_letter_reason || ' ' || convert_from(body, 'UTF8') FROM sbq_peek('rt_fsrc/$deadletterqueue')),
    'MessagingEntityNotFound kept', 'F4: what is sent meanwhile is dead-lettered where it was sent, as before');
SELECT sbq_grant('rt_fsrc', 'sbq_rt_creator', ARRAY['listen']);
SELECT is(pg_temp.try('sbq_rt_creator', $$SELECT sbq_create_queue('rt_fdst')$$),
    '42501: permission denied to create "rt_fdst" / "rt_fsrc" forwards to that name: made, it would receive what "rt_fsrc" forwards, which needs the right "manage" on both.',
    'F5: a role that holds a right on the forwarding queue is told which it is');
SELECT pg_temp.works('F6', 'sbq_rt_creator', 'sbq_create_queue under the name a queue it manages forwards to',
    $$SELECT sbq_create_queue('rt_fdst3')$$);
SELECT sbq_create_queue('rt_fdst');
SELECT sbq_send('rt_fsrc', 'resumed');
SELECT is((SELECT string_agg(convert_from(body, 'UTF8'), ',') FROM sbq_peek('rt_fdst')), 'resumed',
    'F7: made by a role that manages both, the destination receives what is forwarded again, as in Service Bus');

-- ------------------------------------------------------------------ revoke
-- revoking send from {send, listen} leaves listen; revoking what is not held changes
-- nothing; revoking send and listen from a manage holder leaves manage
SELECT pg_temp.works('K0', 'sbq_rt_creator', 'sbq_grant of listen besides send', $$SELECT sbq_grant('rt_c', 'sbq_rt_s', ARRAY['listen'])$$);
SELECT pg_temp.works('K1', 'sbq_rt_creator', 'sbq_revoke of send', $$SELECT sbq_revoke('rt_c', 'sbq_rt_s', ARRAY['send'])$$);
SELECT is((SELECT rights FROM sbq_rights WHERE entity = 'rt_c' AND role = 'sbq_rt_s'),
    ARRAY['listen'], 'K2: sbq_rt_s keeps listen on rt_c');
SELECT * FROM pg_temp.denied('K3', 'sbq_rt_s', 'sbq_send to rt_c (send revoked)',
    $$SELECT sbq_send('rt_c', 's')$$, 'rt_c', 'send');
SELECT is(pg_temp.val('sbq_rt_s', $$SELECT count(*) FROM sbq_peek('rt_c', 10)$$), '1',
    'K4: sbq_rt_s still peeks rt_c (listen kept)');
CREATE FUNCTION pg_temp.unchanged(id text, what text, r name, sql text) RETURNS SETOF text
LANGUAGE plpgsql AS $$
DECLARE
    before text := pg_temp.fingerprint();
BEGIN
    RETURN NEXT is(pg_temp.try(r, sql), 'ok', id || ': ' || what || ' works');
    RETURN NEXT is(pg_temp.fingerprint(), before, id || ': and changes nothing');
END $$;
SELECT * FROM pg_temp.unchanged('K5', 'a revoke of manage from a role holding listen only', 'sbq_rt_creator',
    $$SELECT sbq_revoke('rt_c', 'sbq_rt_s', ARRAY['manage', 'send'])$$);
SELECT * FROM pg_temp.unchanged('K6', 'a revoke from a role holding nothing on the queue', 'sbq_rt_creator',
    $$SELECT sbq_revoke('rt_c', 'sbq_rt_n', ARRAY['send', 'listen', 'manage'])$$);
SELECT pg_temp.works('K7', 'sbq_rt_creator', 'sbq_revoke of send and listen from itself',
    $$SELECT sbq_revoke('rt_c', 'sbq_rt_creator', ARRAY['send', 'listen'])$$);
SELECT is((SELECT rights FROM sbq_rights WHERE entity = 'rt_c' AND role = 'sbq_rt_creator'),
    ARRAY['manage'], 'K8: the creator keeps manage');
SELECT pg_temp.works('K9', 'sbq_rt_creator', 'sbq_send (manage kept)', $$SELECT sbq_send('rt_c', 'c2')$$);
SELECT pg_temp.works('K10', 'sbq_rt_creator', 'sbq_revoke of listen from sbq_rt_s', $$SELECT sbq_revoke('rt_c', 'sbq_rt_s', ARRAY['listen'])$$);
SELECT is((SELECT count(*) FROM sbq_rights WHERE entity = 'rt_c' AND role = 'sbq_rt_s'), 0::bigint,
    'K11: with its last right revoked, sbq_rt_s has no row left on rt_c');
SELECT * FROM pg_temp.denied('K12', 'sbq_rt_s', 'sbq_peek of rt_c (everything revoked)',
    $$SELECT * FROM sbq_peek('rt_c')$$, 'rt_c', 'listen');
-- a grant rolled back to a savepoint is gone, in this session too
SAVEPOINT k13;
DO $$ BEGIN PERFORM sbq_grant('rt_c', 'sbq_rt_n', ARRAY['listen']); END $$;
SELECT is(pg_temp.val('sbq_rt_n', $$SELECT count(*) FROM sbq_peek('rt_c', 10)$$), '2',
    'K13: sbq_rt_n peeks rt_c once granted listen');
ROLLBACK TO SAVEPOINT k13;
SELECT * FROM pg_temp.denied('K14', 'sbq_rt_n', 'sbq_peek of rt_c (the grant rolled back)',
    $$SELECT * FROM sbq_peek('rt_c')$$, 'rt_c', 'listen');

-- ------------------------------------------------------------------ grant arguments
-- checked before the queue is looked up: 22004 for a NULL, 22023 for a bad value,
-- 42704 for a role that does not exist; then SB001 for a queue that does not exist;
-- then the caller's manage (42501)
SELECT * FROM pg_temp.bad('A1', 'a grant on the dead-letter sub-queue',
    $$SELECT sbq_grant('rt_q/$deadletterqueue', 'sbq_rt_n', ARRAY['listen'])$$, '22023');
SELECT throws_ok($$SELECT sbq_grant('rt_q/$deadletterqueue', 'sbq_rt_n', ARRAY['listen'])$$, '22023',
    'rights are granted on a queue, not on its dead-letter sub-queue',
    'A1b: and says that rights on a queue cover its dead-letter sub-queue');
SELECT * FROM pg_temp.bad('A2', 'a grant of an unknown right',
    $$SELECT sbq_grant('rt_q', 'sbq_rt_n', ARRAY['send', 'read'])$$, '22023');
SELECT * FROM pg_temp.bad('A3', 'a grant of no right',
    $$SELECT sbq_grant('rt_q', 'sbq_rt_n', ARRAY[]::text[])$$, '22023');
SELECT * FROM pg_temp.bad('A4', 'a grant with a NULL right',
    $$SELECT sbq_grant('rt_q', 'sbq_rt_n', ARRAY['send', NULL])$$, '22004');
SELECT * FROM pg_temp.bad('A5', 'a grant on a NULL queue',
    $$SELECT sbq_grant(NULL, 'sbq_rt_n', ARRAY['send'])$$, '22004');
SELECT * FROM pg_temp.bad('A6', 'a grant to a NULL role',
    $$SELECT sbq_grant('rt_q', NULL, ARRAY['send'])$$, '22004');
SELECT * FROM pg_temp.bad('A7', 'a grant of NULL rights',
    $$SELECT sbq_grant('rt_q', 'sbq_rt_n', NULL)$$, '22004');
SELECT * FROM pg_temp.bad('A8', 'a grant to a role that does not exist',
    $$SELECT sbq_grant('rt_q', 'sbq_rt_no_such_role', ARRAY['send'])$$, '42704');
SELECT * FROM pg_temp.bad('A9', 'a grant on a queue that does not exist',
    $$SELECT sbq_grant('rt_no_such_queue', 'sbq_rt_n', ARRAY['send'])$$, 'SB001');
SELECT * FROM pg_temp.bad('A10', 'a grant to a role that does not exist on a queue that does not exist (the role first)',
    $$SELECT sbq_grant('rt_no_such_queue', 'sbq_rt_no_such_role', ARRAY['send'])$$, '42704');
SELECT * FROM pg_temp.bad('A11', 'a revoke on the dead-letter sub-queue',
    $$SELECT sbq_revoke('rt_q/$deadletterqueue', 'sbq_rt_l', ARRAY['listen'])$$, '22023');
SELECT * FROM pg_temp.bad('A12', 'a revoke from a role that does not exist',
    $$SELECT sbq_revoke('rt_q', 'sbq_rt_no_such_role', ARRAY['send'])$$, '42704');
SELECT * FROM pg_temp.bad('A13', 'a revoke of an unknown right',
    $$SELECT sbq_revoke('rt_q', 'sbq_rt_l', ARRAY['listen', 'write'])$$, '22023');
SELECT * FROM pg_temp.bad('A14', 'a revoke of NULL rights',
    $$SELECT sbq_revoke('rt_q', 'sbq_rt_l', NULL)$$, '22004');
SELECT is(split_part(pg_temp.try('sbq_rt_n', $$SELECT sbq_grant('rt_no_such_queue', 'sbq_rt_n', ARRAY['send'])$$), ':', 1),
    'SB001', 'A15: a role without rights granting on a queue that does not exist gets SB001');
SELECT is(split_part(pg_temp.try('sbq_rt_n', $$SELECT sbq_grant('rt_q', 'sbq_rt_n', ARRAY['sned'])$$), ':', 1),
    '22023', 'A16: a role without rights granting an unknown right gets 22023 (arguments first)');
SELECT is(split_part(pg_temp.try('sbq_rt_n', $$SELECT sbq_grant('rt_q', 'sbq_rt_n', ARRAY['send'])$$), ':', 1),
    '42501', 'A17: with good arguments, a role without manage gets 42501');
SELECT pg_temp.works('A18', 'sbq_rt_m', 'sbq_grant of rights in any letter case',
    $$SELECT sbq_grant('rt_q', 'sbq_rt_n', ARRAY['Listen'])$$);
SELECT is(pg_temp.val('sbq_rt_n', $$SELECT count(*) FROM sbq_peek('rt_q', 10)$$), '3',
    'A19: the right granted as ''Listen'' is listen');
SELECT pg_temp.works('A20', 'sbq_rt_m', 'sbq_revoke of rights in any letter case',
    $$SELECT sbq_revoke('rt_q', 'sbq_rt_n', ARRAY['LISTEN'])$$);
SELECT * FROM pg_temp.denied('A21', 'sbq_rt_n', 'sbq_peek (listen revoked as ''LISTEN'')',
    $$SELECT * FROM sbq_peek('rt_q')$$, 'rt_q', 'listen');

-- ------------------------------------------------------------------ dropping a role
CREATE ROLE sbq_rt_d1;
CREATE ROLE sbq_rt_d2;
DO $$ BEGIN
    PERFORM sbq_grant('rt_q', 'sbq_rt_d1', ARRAY['send']);
    PERFORM sbq_grant('rt_b', 'sbq_rt_d1', ARRAY['listen', 'manage']);
    PERFORM sbq_create_queue('rt_tmp');
    PERFORM sbq_grant('rt_tmp', 'sbq_rt_d2', ARRAY['send']);
END $$;
SELECT throws_ok('DROP ROLE sbq_rt_d1', '2BP01', NULL,
    'D1: a role holding rights on two queues cannot be dropped (2BP01)');
DO $$ BEGIN PERFORM sbq_revoke('rt_q', 'sbq_rt_d1', ARRAY['send']); END $$;
SELECT throws_ok('DROP ROLE sbq_rt_d1', '2BP01', NULL,
    'D2: nor with its rights on one queue revoked and those on the other left');
DO $$ BEGIN PERFORM sbq_revoke('rt_b', 'sbq_rt_d1', ARRAY['manage']); END $$;
SELECT throws_ok('DROP ROLE sbq_rt_d1', '2BP01', NULL,
    'D3: nor with listen left of its rights on the other');
DO $$ BEGIN PERFORM sbq_revoke('rt_b', 'sbq_rt_d1', ARRAY['listen']); END $$;
SELECT lives_ok('DROP ROLE sbq_rt_d1', 'D4: with all its rights revoked, the role is dropped');
SELECT throws_ok('DROP ROLE sbq_rt_d2', '2BP01', NULL,
    'D5: a role holding rights on one queue cannot be dropped');
DO $$ BEGIN PERFORM sbq_delete_queue('rt_tmp'); END $$;
SELECT lives_ok('DROP ROLE sbq_rt_d2', 'D6: once that queue is deleted, the role is dropped');
SELECT is((SELECT count(*) FROM sbq.rights r WHERE NOT EXISTS (SELECT FROM pg_roles a WHERE a.oid = r.role::oid)
                                                AND r.role::oid <> 0),
    0::bigint, 'D7: no right names a role that does not exist');

-- ------------------------------------------------------------------ the tables stay closed
SELECT is(pg_temp.try('sbq_rt_n', 'SELECT * FROM sbq.messages'),
    '42501: permission denied for schema sbq', 'T1: a role without rights cannot read sbq.messages');
SELECT is(pg_temp.try('sbq_rt_n', 'SELECT * FROM sbq.queues'),
    '42501: permission denied for schema sbq', 'T2: nor sbq.queues');
SELECT is(pg_temp.try('sbq_rt_n', 'SELECT * FROM sbq.rights'),
    '42501: permission denied for schema sbq', 'T3: nor sbq.rights');
SELECT is(pg_temp.try('sbq_rt_m', $$INSERT INTO sbq.rights VALUES (1, 'sbq_rt_m', 7)$$),
    '42501: permission denied for schema sbq', 'T4: a role with manage cannot write sbq.rights either');
SELECT is(pg_temp.try('sbq_rt_l', 'SELECT * FROM sbq.dead_letters'),
    '42501: permission denied for schema sbq', 'T5: nor can a role with listen read sbq.dead_letters');
-- a call (its work done as the owner of the tables) leaves the caller its own role,
-- whether it worked or failed and was caught
CREATE FUNCTION pg_temp.after_call(sql text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    res text;
BEGIN
    BEGIN
        EXECUTE sql;
        res := 'ok';
    EXCEPTION WHEN OTHERS THEN
        res := SQLSTATE;
    END;
    res := res || ' ' || current_user;
    BEGIN
        PERFORM count(*) FROM sbq.messages;
        res := res || ' read sbq.messages';
    EXCEPTION WHEN insufficient_privilege THEN
        res := res || ' 42501';
    END;
    RETURN res;
END $$;
SELECT is(pg_temp.val('sbq_rt_l', format('SELECT pg_temp.after_call(%L)',
        format('SELECT sbq_complete(%L, %L::uuid)', 'rt_q', gen_random_uuid()))),
    'SB002 sbq_rt_l 42501', 'T6: after an error inside a call, caught, the caller is itself again and cannot read the tables');
SELECT is(pg_temp.val('sbq_rt_s', format('SELECT pg_temp.after_call(%L)', $$SELECT sbq_peek('rt_q')$$)),
    '42501 sbq_rt_s 42501', 'T7: the same after a refused call');
SELECT is(pg_temp.val('sbq_rt_l', format('SELECT pg_temp.after_call(%L)', $$SELECT sbq_peek('rt_q')$$)),
    'ok sbq_rt_l 42501', 'T8: and after a call that worked');
SELECT is(pg_temp.val('sbq_rt_s', format('SELECT pg_temp.after_call(%L)', $$SELECT sbq_send('rt_q', 't8')$$)),
    'ok sbq_rt_s 42501', 'T9: and after a send that worked');

-- ------------------------------------------------------------------ a call inside a call
-- A constraint or trigger on the tables runs inside a call, as the tables' owner (here
-- a superuser). An sbqueue call it makes is refused (0A000) before it does anything;
-- the outer caller, whether the refusal was caught or failed the outer call, is itself
-- again afterwards, and the next calls of the transaction work.
CREATE FUNCTION public.sbq_rt_nested(b bytea) RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
    IF b = 'nest caught' THEN
        BEGIN
            PERFORM public.sbq_send('rt_q'::text, 'inner'::text);
            PERFORM set_config('sbq_rt.inner', 'ok', false);
        EXCEPTION WHEN OTHERS THEN
            PERFORM set_config('sbq_rt.inner', SQLSTATE, false);
        END;
    ELSIF b = 'nest' THEN
        PERFORM public.sbq_send('rt_q'::text, 'inner'::text);
    END IF;
    RETURN true;
END $$;
CREATE FUNCTION public.sbq_rt_nested_trigger() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.body = 'nest delete' THEN
        BEGIN
            PERFORM public.sbq_peek('rt_q'::text);
            PERFORM set_config('sbq_rt.inner', 'ok', false);
        EXCEPTION WHEN OTHERS THEN
            PERFORM set_config('sbq_rt.inner', SQLSTATE, false);
        END;
    END IF;
    RETURN OLD;
END $$;
ALTER TABLE sbq.messages ADD CONSTRAINT sbq_rt_nested CHECK (public.sbq_rt_nested(body)) NOT VALID;
CREATE TRIGGER sbq_rt_nested BEFORE DELETE ON sbq.messages
    FOR EACH ROW EXECUTE FUNCTION public.sbq_rt_nested_trigger();
SELECT sbq_purge_queue('rt_q') AS purged_n \gset
SELECT is(pg_temp.val('sbq_rt_s', format('SELECT pg_temp.after_call(%L)', $$SELECT sbq_send('rt_q', 'nest caught')$$)),
    'ok sbq_rt_s 42501', 'N1: a send whose constraint makes a call and catches its error works, and the caller is itself again');
SELECT is(current_setting('sbq_rt.inner', true), '0A000', 'N2: the call inside was refused with 0A000');
SELECT is(pg_temp.val('sbq_rt_s', format('SELECT pg_temp.after_call(%L)', $$SELECT sbq_send('rt_q', 'nest')$$)),
    '0A000 sbq_rt_s 42501', 'N3: not caught, the refusal fails the outer send, and the caller is itself again');
SELECT is(pg_temp.val('sbq_rt_s', format('SELECT pg_temp.after_call(%L)', $$SELECT sbq_send('rt_q', 'plain')$$)),
    'ok sbq_rt_s 42501', 'N4: the next send of the transaction works');
SELECT is(pg_temp.val('sbq_rt_s', format('SELECT pg_temp.after_call(%L)', $$SELECT sbq_send('rt_q', 'nest delete')$$)),
    'ok sbq_rt_s 42501', 'N5: so does one the delete trigger looks at');
SELECT set_config('sbq_rt.inner', '', false) AS reset_inner \gset
SELECT is(pg_temp.val('sbq_rt_sl', format('SELECT pg_temp.after_call(%L)',
        $$SELECT count(*) FROM sbq_receive('rt_q', 10, '0', 'receive_and_delete')$$)),
    'ok sbq_rt_sl 42501', 'N6: a receive-and-delete whose delete trigger makes a call and catches its error works, the caller itself again');
SELECT is(current_setting('sbq_rt.inner', true), '0A000', 'N7: the call inside was refused with 0A000');
SELECT is((SELECT count(*) FROM sbq.messages m JOIN sbq.queues q USING (queue_id) WHERE q.name = 'rt_q'),
    0::bigint, 'N8: the three stored messages were received and deleted, no inner one was stored');
SELECT is(pg_temp.val('sbq_rt_sl', $$SELECT string_agg(convert_from(body, 'UTF8'), ',') FROM sbq_peek('rt_q', 10)$$),
    NULL, 'N9: and the queue is empty');
DROP TRIGGER sbq_rt_nested ON sbq.messages;
ALTER TABLE sbq.messages DROP CONSTRAINT sbq_rt_nested;

-- ------------------------------------------------------------------ a big batch without rights
-- the array's size is checked before the queue and the caller's rights: 22023 at
-- once, nothing done
SELECT * FROM pg_temp.bad('B1', 'a send_batch of 6,000 bodies (superuser)',
    $$SELECT sbq_send_batch('rt_q', (SELECT array_agg('b' || i) FROM generate_series(1, 6000) i))$$, '22023');
CREATE FUNCTION pg_temp.ms_as(r name, sql text) RETURNS float8 LANGUAGE plpgsql AS $$
DECLARE
    t0 timestamptz := clock_timestamp();
BEGIN
    PERFORM pg_temp.try(r, sql);
    RETURN extract(epoch FROM clock_timestamp() - t0) * 1000;
END $$;
SELECT fingerprint AS fp_b FROM pg_temp.fingerprint() \gset
SELECT is(split_part(pg_temp.try('sbq_rt_n',
        $$SELECT sbq_send_batch('rt_q', (SELECT array_agg('b' || i) FROM generate_series(1, 6000) i))$$), ':', 1),
    '22023', 'B2: a send_batch of 6,000 bodies by a role without rights fails with 22023, the cap before the right');
SELECT cmp_ok(pg_temp.ms_as('sbq_rt_n',
        $$SELECT sbq_send_batch('rt_q', (SELECT array_agg('b' || i) FROM generate_series(1, 6000) i))$$),
    '<', 300::float8, 'B3: and it is refused at once');
SELECT is(pg_temp.fingerprint(), :'fp_b', 'B4: nothing changed');

SELECT * FROM finish();
ROLLBACK;
