-- sbqueue pgTAP: bad input to queue management, sending, receiving, peeking and
-- maintenance (research/reliability.md 6.5, SQLSTATEs from API.md "Errors").
-- Every case B.. is two assertions: the SQLSTATE, and that no state changed: a
-- fingerprint of every table in schema sbq (all columns, lock columns included) and of
-- the locks kept in shared memory is
-- the same before and after the failing call. B150-B154 are inputs the contract lets
-- an implementation accept or refuse with 22023 (never a raw overflow error). C.. are
-- controls of the fixture and the helpers; B180-B184 check the end state. Cases
-- B01-B184 are here; settling, deferral, scheduling and dead-letter cases continue
-- in bad_input_dlq_settle.sql (B201-B314). No sleeps.
BEGIN;
SELECT plan(314);

-- ------------------------------------------------------------ helpers
\ir bad_input_setup.psql

-- Runs a statement in a read-only transaction state (reverted when the call's
-- subtransaction is rolled back by throws_ok).
CREATE FUNCTION pg_temp.read_only(sql text) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    PERFORM set_config('transaction_read_only', 'on', true);
    EXECUTE sql;
END $$;

-- Runs statements and always rolls them back; returns the SQLSTATE they failed with,
-- or 00000 when they all succeeded. For inputs the contract lets an implementation
-- either accept or refuse with 22023.
CREATE FUNCTION pg_temp.outcome(sql text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    BEGIN
        EXECUTE sql;
        RAISE SQLSTATE 'ZZ999';
    EXCEPTION WHEN OTHERS THEN
        RETURN CASE WHEN SQLSTATE = 'ZZ999' THEN '00000' ELSE SQLSTATE END;
    END;
END $$;

-- The target of the SQL injection attempts.
CREATE TABLE public.t (x integer);
INSERT INTO public.t VALUES (42);
CREATE FUNCTION pg_temp.t_intact() RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
    IF to_regclass('public.t') IS NULL THEN
        RETURN false;
    END IF;
    RETURN (SELECT count(*) = 1 AND min(x) = 42 FROM public.t);
END $$;

-- ------------------------------------------------------------ fixtures
DO $$ BEGIN
    PERFORM sbq_create_queue('b20_q');
    PERFORM sbq_create_queue('b20_small', max_message_size => 10);
    PERFORM sbq_create_queue('b20_dup', duplicate_detection_window => '1 minute');
END $$;
CREATE TEMP TABLE s (k text PRIMARY KEY, v bigint);
INSERT INTO s VALUES ('q1', sbq_send('b20_q', 'one'::text, message_id => 'q1'));
INSERT INTO s VALUES ('q2', sbq_send('b20_q', 'two'::text, message_id => 'q2'));
INSERT INTO s VALUES ('dup1', sbq_send('b20_dup', 'd'::text, message_id => 'dup-1'));

-- controls: the fingerprint covers the tables and sees every kind of change
SELECT ok(pg_temp.fingerprint_tables() @> ARRAY['queues', 'messages', 'dead_letters', 'queue_counters', 'duplicate_ids']::name[],
    'C01: the fingerprint covers sbq.queues, sbq.messages, sbq.dead_letters, sbq.queue_counters and sbq.duplicate_ids');
SELECT pg_temp.fingerprint() AS fp \gset
CREATE TEMP TABLE r AS SELECT * FROM sbq_receive('b20_q');
SELECT isnt(pg_temp.fingerprint(), :'fp', 'C02: the fingerprint changes when a lock is taken (lock columns and leases are in it)');
SELECT is((SELECT sequence_number FROM r), (SELECT v FROM s WHERE k = 'q1'),
    'C03: q1 is locked for the rest of the file; q2 stays active');
SELECT pg_temp.fingerprint() AS fp \gset
SELECT lives_ok($$SELECT sbq_send('b20_small', '0123456789'::text)$$,
    'C04: a body of exactly max_message_size (10) bytes is accepted');
SELECT isnt(pg_temp.fingerprint(), :'fp', 'C05: the fingerprint changes when a message is stored');
SELECT lives_ok($$SELECT sbq_create_queue(repeat('n', 259) || '9')$$,
    'C06: a queue name of 260 characters is accepted');

-- ------------------------------------------------------------ sbq_create_queue: names
SELECT * FROM pg_temp.bad('B01', 'create_queue(NULL)', $$SELECT sbq_create_queue(NULL)$$, '22004');
SELECT * FROM pg_temp.bad('B02', 'create_queue('''') (empty name)', $$SELECT sbq_create_queue('')$$, '22023');
SELECT * FROM pg_temp.bad('B03', 'create_queue of a 261-character name',
    $$SELECT sbq_create_queue(repeat('n', 261))$$, '22023');
SELECT * FROM pg_temp.bad('B04', 'create_queue(''has space'')', $$SELECT sbq_create_queue('has space')$$, '22023');
SELECT * FROM pg_temp.bad('B05', 'create_queue(''has#hash'')', $$SELECT sbq_create_queue('has#hash')$$, '22023');
SELECT * FROM pg_temp.bad('B06', 'create_queue(''dollar$sign'')', $$SELECT sbq_create_queue('dollar$sign')$$, '22023');
SELECT * FROM pg_temp.bad('B07', 'create_queue with a single quote in the name',
    $$SELECT sbq_create_queue('it''s')$$, '22023');
SELECT * FROM pg_temp.bad('B08', 'create_queue with a double quote in the name',
    $$SELECT sbq_create_queue('say"hi')$$, '22023');
SELECT * FROM pg_temp.bad('B09', 'create_queue(''x''''; DROP TABLE t; --'') (SQL injection)',
    $q$SELECT sbq_create_queue($$x'; DROP TABLE t; --$$)$q$, '22023');
SELECT ok(pg_temp.t_intact(), 'B09: table t still exists with its row after the injection attempt');
SELECT * FROM pg_temp.bad('B10', 'create_queue(''/lead'') (leading slash)', $$SELECT sbq_create_queue('/lead')$$, '22023');
SELECT * FROM pg_temp.bad('B11', 'create_queue(''trail/'') (trailing slash)', $$SELECT sbq_create_queue('trail/')$$, '22023');
SELECT * FROM pg_temp.bad('B12', 'create_queue(''.lead'') (leading dot)', $$SELECT sbq_create_queue('.lead')$$, '22023');
SELECT * FROM pg_temp.bad('B13', 'create_queue(''trail.'') (trailing dot)', $$SELECT sbq_create_queue('trail.')$$, '22023');
SELECT * FROM pg_temp.bad('B14', 'create_queue(''b20_new '') (trailing space)', $$SELECT sbq_create_queue('b20_new ')$$, '22023');
SELECT * FROM pg_temp.bad('B15', 'create_queue(''café'') (non-ASCII)', $$SELECT sbq_create_queue('café')$$, '22023');
SELECT * FROM pg_temp.bad('B16', 'create_queue(''b20_q/$deadletterqueue'')',
    $$SELECT sbq_create_queue('b20_q/$deadletterqueue')$$, '22023');
SELECT * FROM pg_temp.bad('B17', 'create_queue(''b20_fresh/$DeadLetterQueue'') (any letter case, no such queue)',
    $$SELECT sbq_create_queue('b20_fresh/$DeadLetterQueue')$$, '22023');
SELECT * FROM pg_temp.bad('B18', 'create_queue(''B20_Q'') of an existing queue in another letter case',
    $$SELECT sbq_create_queue('B20_Q')$$, 'SB006');
SELECT * FROM pg_temp.bad('B19', 'create_queue with a tab in the name', $$SELECT sbq_create_queue(E'tab\there')$$, '22023');

-- ------------------------------------------------------------ sbq_create_queue: properties
SELECT * FROM pg_temp.bad('B20', 'create_queue lock_duration 0',
    $$SELECT sbq_create_queue('b20_p', lock_duration => '0')$$, '22023');
SELECT * FROM pg_temp.bad('B21', 'create_queue lock_duration -1 second',
    $$SELECT sbq_create_queue('b20_p', lock_duration => '-1 second')$$, '22023');
SELECT * FROM pg_temp.bad('B22', 'create_queue lock_duration 5 min 1 s (above 5 min)',
    $$SELECT sbq_create_queue('b20_p', lock_duration => '5 minutes 1 second')$$, '22023');
SELECT * FROM pg_temp.bad('B23', 'create_queue lock_duration 1000000 years',
    $$SELECT sbq_create_queue('b20_p', lock_duration => '1000000 years')$$, '22023');
SELECT * FROM pg_temp.bad('B24', 'create_queue lock_duration NULL',
    $$SELECT sbq_create_queue('b20_p', lock_duration => NULL)$$, '22004');
SELECT * FROM pg_temp.bad('B25', 'create_queue max_delivery_count 0',
    $$SELECT sbq_create_queue('b20_p', max_delivery_count => 0)$$, '22023');
SELECT * FROM pg_temp.bad('B26', 'create_queue max_delivery_count -1',
    $$SELECT sbq_create_queue('b20_p', max_delivery_count => -1)$$, '22023');
SELECT * FROM pg_temp.bad('B27', 'create_queue max_delivery_count NULL',
    $$SELECT sbq_create_queue('b20_p', max_delivery_count => NULL)$$, '22004');
SELECT * FROM pg_temp.bad('B28', 'create_queue default_message_ttl 0',
    $$SELECT sbq_create_queue('b20_p', default_message_ttl => '0')$$, '22023');
SELECT * FROM pg_temp.bad('B29', 'create_queue default_message_ttl -1 second',
    $$SELECT sbq_create_queue('b20_p', default_message_ttl => '-1 second')$$, '22023');
SELECT * FROM pg_temp.bad('B30', 'create_queue duplicate_detection_window 19 s (below 20 s)',
    $$SELECT sbq_create_queue('b20_p', duplicate_detection_window => '19 seconds')$$, '22023');
SELECT * FROM pg_temp.bad('B31', 'create_queue duplicate_detection_window 7 days 1 s (above 7 days)',
    $$SELECT sbq_create_queue('b20_p', duplicate_detection_window => '7 days 1 second')$$, '22023');
SELECT * FROM pg_temp.bad('B32', 'create_queue max_message_size 0',
    $$SELECT sbq_create_queue('b20_p', max_message_size => 0)$$, '22023');
SELECT * FROM pg_temp.bad('B33', 'create_queue max_message_size -1',
    $$SELECT sbq_create_queue('b20_p', max_message_size => -1)$$, '22023');
SELECT * FROM pg_temp.bad('B34', 'create_queue dead_lettering_on_message_expiration NULL',
    $$SELECT sbq_create_queue('b20_p', dead_lettering_on_message_expiration => NULL)$$, '22004');
SELECT * FROM pg_temp.bad('B35', 'create_queue lock_duration ''soon'' (interval input, PostgreSQL)',
    $$SELECT sbq_create_queue('b20_p', lock_duration => 'soon')$$, '22007');
SELECT * FROM pg_temp.bad('B36', 'create_queue max_delivery_count ''10000000000'' (integer input, PostgreSQL)',
    $$SELECT sbq_create_queue('b20_p', max_delivery_count => '10000000000')$$, '22003');

-- ------------------------------------------------------------ sbq_update_queue
SELECT * FROM pg_temp.bad('B37', 'update_queue(NULL)',
    $$SELECT sbq_update_queue(NULL, max_delivery_count => 3)$$, '22004');
SELECT * FROM pg_temp.bad('B38', 'update_queue(''b20_q/$deadletterqueue'')',
    $$SELECT sbq_update_queue('b20_q/$deadletterqueue', max_delivery_count => 3)$$, '22023');
SELECT * FROM pg_temp.bad('B39', 'update_queue of an unknown queue',
    $$SELECT sbq_update_queue('b20_nosuch', max_delivery_count => 3)$$, 'SB001');
SELECT * FROM pg_temp.bad('B40', 'update_queue(''b20_q '') (trailing space)',
    $$SELECT sbq_update_queue('b20_q ', max_delivery_count => 3)$$, '22023');
SELECT * FROM pg_temp.bad('B41', 'update_queue lock_duration 0',
    $$SELECT sbq_update_queue('b20_q', lock_duration => '0')$$, '22023');
SELECT * FROM pg_temp.bad('B42', 'update_queue lock_duration 1000000 years',
    $$SELECT sbq_update_queue('b20_q', lock_duration => '1000000 years')$$, '22023');
SELECT * FROM pg_temp.bad('B43', 'update_queue max_delivery_count 0 (with a valid lock_duration: all or nothing)',
    $$SELECT sbq_update_queue('b20_q', lock_duration => '1 minute', max_delivery_count => 0)$$, '22023');
SELECT * FROM pg_temp.bad('B44', 'update_queue default_message_ttl -1 second',
    $$SELECT sbq_update_queue('b20_q', default_message_ttl => '-1 second')$$, '22023');
SELECT * FROM pg_temp.bad('B45', 'update_queue duplicate_detection_window 19 s',
    $$SELECT sbq_update_queue('b20_dup', duplicate_detection_window => '19 seconds')$$, '22023');
SELECT * FROM pg_temp.bad('B46', 'update_queue duplicate_detection_window 8 days',
    $$SELECT sbq_update_queue('b20_dup', duplicate_detection_window => '8 days')$$, '22023');
SELECT * FROM pg_temp.bad('B47', 'update_queue max_message_size -1',
    $$SELECT sbq_update_queue('b20_q', max_message_size => -1)$$, '22023');

-- ------------------------------------------------------------ sbq_delete_queue, sbq_purge_queue, sbq_get_queue
SELECT * FROM pg_temp.bad('B48', 'delete_queue(NULL)', $$SELECT sbq_delete_queue(NULL)$$, '22004');
SELECT * FROM pg_temp.bad('B49', 'delete_queue(''b20_q/$deadletterqueue'') (must not drop the queue)',
    $$SELECT sbq_delete_queue('b20_q/$deadletterqueue')$$, '22023');
SELECT * FROM pg_temp.bad('B50', 'delete_queue of an unknown queue', $$SELECT sbq_delete_queue('b20_nosuch')$$, 'SB001');
SELECT * FROM pg_temp.bad('B51', 'delete_queue(''b20_q '') (trailing space, never an alias of b20_q)',
    $$SELECT sbq_delete_queue('b20_q ')$$, '22023');
SELECT * FROM pg_temp.bad('B52', 'delete_queue with an SQL injection name',
    $q$SELECT sbq_delete_queue($$b20_q'; DROP TABLE t; --$$)$q$, '22023');
SELECT ok(pg_temp.t_intact(), 'B52: table t still exists with its row after the injection attempt');
SELECT * FROM pg_temp.bad('B53', 'purge_queue(NULL)', $$SELECT sbq_purge_queue(NULL)$$, '22004');
SELECT * FROM pg_temp.bad('B54', 'purge_queue of an unknown queue', $$SELECT sbq_purge_queue('b20_nosuch')$$, 'SB001');
SELECT * FROM pg_temp.bad('B55', 'purge_queue of an unknown queue''s dead-letter path',
    $$SELECT sbq_purge_queue('b20_nosuch/$deadletterqueue')$$, 'SB001');
SELECT * FROM pg_temp.bad('B56', 'purge_queue(''/b20_q'') (leading slash, never an alias of b20_q)',
    $$SELECT sbq_purge_queue('/b20_q')$$, '22023');
SELECT * FROM pg_temp.bad('B57', 'get_queue(NULL)', $$SELECT sbq_get_queue(NULL)$$, '22004');
SELECT * FROM pg_temp.bad('B58', 'get_queue of an unknown queue', $$SELECT sbq_get_queue('b20_nosuch')$$, 'SB001');
SELECT * FROM pg_temp.bad('B59', 'get_queue of a 261-character name', $$SELECT sbq_get_queue(repeat('n', 261))$$, '22023');
SELECT * FROM pg_temp.bad('B60', 'get_queue(''b20_q '') (trailing space)', $$SELECT sbq_get_queue('b20_q ')$$, '22023');

-- ------------------------------------------------------------ sbq_send (text, bytea, jsonb)
SELECT * FROM pg_temp.bad('B61', 'send(NULL queue, text)', $$SELECT sbq_send(NULL, 'x'::text)$$, '22004');
SELECT * FROM pg_temp.bad('B62', 'send(q, NULL::text)', $$SELECT sbq_send('b20_q', NULL::text)$$, '22004');
SELECT * FROM pg_temp.bad('B63', 'send(q, NULL::bytea)', $$SELECT sbq_send('b20_q', NULL::bytea)$$, '22004');
SELECT * FROM pg_temp.bad('B64', 'send(q, NULL::jsonb)', $$SELECT sbq_send('b20_q', NULL::jsonb)$$, '22004');
SELECT * FROM pg_temp.bad('B65', 'send to an unknown queue', $$SELECT sbq_send('b20_nosuch', 'x'::text)$$, 'SB001');
SELECT * FROM pg_temp.bad('B66', 'send(''b20_q '', ...) (trailing space, never an alias of b20_q)',
    $$SELECT sbq_send('b20_q ', 'x'::text)$$, '22023');
SELECT * FROM pg_temp.bad('B67', 'send('' b20_q'', ...) (leading space)', $$SELECT sbq_send(' b20_q', 'x'::bytea)$$, '22023');
SELECT * FROM pg_temp.bad('B68', 'send to an SQL injection name',
    $q$SELECT sbq_send($$b20_q'; DROP TABLE t; --$$, 'x'::text)$q$, '22023');
SELECT ok(pg_temp.t_intact(), 'B68: table t still exists with its row after the injection attempt');
SELECT * FROM pg_temp.bad('B69', 'send text to b20_q/$deadletterqueue',
    $$SELECT sbq_send('b20_q/$deadletterqueue', 'x'::text)$$, 'SB010');
SELECT * FROM pg_temp.bad('B70', 'send bytea to B20_Q/$DEADLETTERQUEUE (any letter case)',
    $$SELECT sbq_send('B20_Q/$DEADLETTERQUEUE', '\x00'::bytea)$$, 'SB010');
SELECT * FROM pg_temp.bad('B71', 'send jsonb to b20_q/$DeadLetterQueue',
    $$SELECT sbq_send('b20_q/$DeadLetterQueue', '{}'::jsonb)$$, 'SB010');
SELECT * FROM pg_temp.bad('B72', 'send text of 11 bytes to a queue with max_message_size 10',
    $$SELECT sbq_send('b20_small', '01234567890'::text)$$, 'SB007');
SELECT * FROM pg_temp.bad('B73', 'send text of 6 characters but 12 UTF-8 bytes (limit in bytes)',
    $$SELECT sbq_send('b20_small', 'éééééé'::text)$$, 'SB007');
SELECT * FROM pg_temp.bad('B74', 'send bytea of 11 bytes', $$SELECT sbq_send('b20_small', '\x0102030405060708090a0b'::bytea)$$, 'SB007');
SELECT * FROM pg_temp.bad('B75', 'send jsonb whose text is 19 bytes',
    $$SELECT sbq_send('b20_small', '{"k": "0123456789"}'::jsonb)$$, 'SB007');
SELECT * FROM pg_temp.bad('B76', 'send text with application_properties a JSON array',
    $$SELECT sbq_send('b20_q', 'x'::text, application_properties => '[1, 2]')$$, '22023');
SELECT * FROM pg_temp.bad('B77', 'send bytea with application_properties a JSON string',
    $$SELECT sbq_send('b20_q', 'x'::bytea, application_properties => '"s"')$$, '22023');
SELECT * FROM pg_temp.bad('B78', 'send jsonb with application_properties a JSON number',
    $$SELECT sbq_send('b20_q', '{}'::jsonb, application_properties => '42')$$, '22023');
SELECT * FROM pg_temp.bad('B79', 'send text with application_properties the JSON null literal',
    $$SELECT sbq_send('b20_q', 'x'::text, application_properties => 'null'::jsonb)$$, '22023');
SELECT * FROM pg_temp.bad('B80', 'send with time_to_live 0',
    $$SELECT sbq_send('b20_q', 'x'::text, time_to_live => '0')$$, '22023');
SELECT * FROM pg_temp.bad('B81', 'send with time_to_live -1 second',
    $$SELECT sbq_send('b20_q', 'x'::text, time_to_live => '-1 second')$$, '22023');
SELECT * FROM pg_temp.bad('B82', 'send with a message_id of 129 characters',
    $$SELECT sbq_send('b20_q', 'x'::text, message_id => repeat('m', 129))$$, '22023');
SELECT * FROM pg_temp.bad('B83', 'send with a session_id of 129 characters',
    $$SELECT sbq_send('b20_q', 'x'::text, session_id => repeat('s', 129))$$, '22023');
SELECT * FROM pg_temp.bad('B84', 'send to a duplicate-detection queue with a body over the limit is not recorded as sent',
    $$SELECT sbq_send('b20_dup', repeat('x', 1048577)::text, message_id => 'dup-2')$$, 'SB007');
SELECT * FROM pg_temp.bad('B85', 'send of invalid UTF-8 (PostgreSQL, before sbqueue runs)',
    $$SELECT sbq_send('b20_q', convert_from('\xc328'::bytea, 'UTF8'))$$, '22021');
SELECT * FROM pg_temp.bad('B86', 'send with application_properties containing \u0000 (jsonb input, PostgreSQL)',
    $$SELECT sbq_send('b20_q', 'x'::text, application_properties => '{"k": "\u0000"}')$$, '22P05');
SELECT * FROM pg_temp.bad('B87', 'send in a read-only transaction',
    $$SELECT pg_temp.read_only($x$SELECT sbq_send('b20_q', 'x'::text)$x$)$$, '25006');
SELECT is(current_setting('transaction_read_only'), 'off',
    'C07: the failed read-only call left the transaction read-write (the cases after it are meaningful)');

-- ------------------------------------------------------------ sbq_send_batch (text[], bytea[], jsonb[])
SELECT * FROM pg_temp.bad('B88', 'send_batch(NULL queue, text[])',
    $$SELECT sbq_send_batch(NULL, ARRAY['a']::text[])$$, '22004');
SELECT * FROM pg_temp.bad('B89', 'send_batch(q, NULL::text[])', $$SELECT sbq_send_batch('b20_q', NULL::text[])$$, '22004');
SELECT * FROM pg_temp.bad('B90', 'send_batch(q, NULL::bytea[])', $$SELECT sbq_send_batch('b20_q', NULL::bytea[])$$, '22004');
SELECT * FROM pg_temp.bad('B91', 'send_batch(q, NULL::jsonb[])', $$SELECT sbq_send_batch('b20_q', NULL::jsonb[])$$, '22004');
SELECT * FROM pg_temp.bad('B92', 'send_batch text[] with a NULL element (nothing stored)',
    $$SELECT sbq_send_batch('b20_q', ARRAY['a', NULL, 'c']::text[])$$, '22004');
SELECT * FROM pg_temp.bad('B93', 'send_batch text[] with one body over max_message_size (nothing stored)',
    $$SELECT sbq_send_batch('b20_small', ARRAY['a', '01234567890', 'c']::text[])$$, 'SB007');
SELECT * FROM pg_temp.bad('B94', 'send_batch bytea[] with one body over max_message_size (nothing stored)',
    $$SELECT sbq_send_batch('b20_small', ARRAY['\x01'::bytea, '\x0102030405060708090a0b'::bytea])$$, 'SB007');
SELECT * FROM pg_temp.bad('B95', 'send_batch jsonb[] with one body over max_message_size (nothing stored)',
    $$SELECT sbq_send_batch('b20_small', ARRAY['1'::jsonb, '{"k": "0123456789"}'::jsonb])$$, 'SB007');
SELECT * FROM pg_temp.bad('B96', 'send_batch text[] to the dead-letter sub-queue',
    $$SELECT sbq_send_batch('b20_q/$deadletterqueue', ARRAY['a']::text[])$$, 'SB010');
SELECT * FROM pg_temp.bad('B97', 'send_batch bytea[] to an unknown queue',
    $$SELECT sbq_send_batch('b20_nosuch', ARRAY['\x01'::bytea])$$, 'SB001');
SELECT * FROM pg_temp.bad('B98', 'send_batch jsonb[] with application_properties a JSON array',
    $$SELECT sbq_send_batch('b20_q', ARRAY['{}'::jsonb], application_properties => '[]')$$, '22023');
SELECT * FROM pg_temp.bad('B99', 'send_batch text[] with time_to_live -1 second',
    $$SELECT sbq_send_batch('b20_q', ARRAY['a', 'b']::text[], time_to_live => '-1 second')$$, '22023');

-- ------------------------------------------------------------ sbq_cancel_scheduled
SELECT * FROM pg_temp.bad('B100', 'cancel_scheduled(NULL queue, seq)',
    format('SELECT sbq_cancel_scheduled(NULL, %s)', (SELECT v FROM s WHERE k = 'q2')), '22004');
SELECT * FROM pg_temp.bad('B101', 'cancel_scheduled(q, NULL)', $$SELECT sbq_cancel_scheduled('b20_q', NULL)$$, '22004');
SELECT * FROM pg_temp.bad('B102', 'cancel_scheduled of an active message',
    format('SELECT sbq_cancel_scheduled(%L, %s)', 'b20_q', (SELECT v FROM s WHERE k = 'q2')), 'SB003');
SELECT * FROM pg_temp.bad('B103', 'cancel_scheduled of a locked message',
    format('SELECT sbq_cancel_scheduled(%L, %s)', 'b20_q', (SELECT v FROM s WHERE k = 'q1')), 'SB003');
SELECT * FROM pg_temp.bad('B104', 'cancel_scheduled of an unknown queue',
    format('SELECT sbq_cancel_scheduled(%L, %s)', 'b20_nosuch', (SELECT v FROM s WHERE k = 'q2')), 'SB001');

-- ------------------------------------------------------------ sbq_receive
SELECT * FROM pg_temp.bad('B105', 'receive(NULL)', $$SELECT * FROM sbq_receive(NULL)$$, '22004');
SELECT * FROM pg_temp.bad('B106', 'receive max_messages NULL', $$SELECT * FROM sbq_receive('b20_q', NULL)$$, '22004');
SELECT * FROM pg_temp.bad('B107', 'receive max_wait NULL', $$SELECT * FROM sbq_receive('b20_q', 1, NULL)$$, '22004');
SELECT * FROM pg_temp.bad('B108', 'receive receive_mode NULL', $$SELECT * FROM sbq_receive('b20_q', 1, '0', NULL)$$, '22004');
SELECT * FROM pg_temp.bad('B109', 'receive max_messages 0', $$SELECT * FROM sbq_receive('b20_q', 0)$$, '22023');
SELECT * FROM pg_temp.bad('B110', 'receive max_messages -1', $$SELECT * FROM sbq_receive('b20_q', -1)$$, '22023');
SELECT * FROM pg_temp.bad('B111', 'receive max_messages 5001', $$SELECT * FROM sbq_receive('b20_q', 5001)$$, '22023');
SELECT * FROM pg_temp.bad('B112', 'receive max_messages 2147483647', $$SELECT * FROM sbq_receive('b20_q', 2147483647)$$, '22023');
SELECT * FROM pg_temp.bad('B113', 'receive max_messages ''10000000000'' (integer input, PostgreSQL)',
    $$SELECT * FROM sbq_receive('b20_q', '10000000000')$$, '22003');
SELECT * FROM pg_temp.bad('B114', 'receive max_wait -1 second', $$SELECT * FROM sbq_receive('b20_q', 1, '-1 second')$$, '22023');
SELECT * FROM pg_temp.bad('B115', 'receive receive_mode ''bogus''',
    $$SELECT * FROM sbq_receive('b20_q', 1, '0', 'bogus')$$, '22023');
SELECT * FROM pg_temp.bad('B116', 'receive from an unknown queue', $$SELECT * FROM sbq_receive('b20_nosuch')$$, 'SB001');
SELECT * FROM pg_temp.bad('B117', 'receive(''b20_q '') (trailing space, must not lock a b20_q message)',
    $$SELECT * FROM sbq_receive('b20_q ', 10)$$, '22023');
SELECT * FROM pg_temp.bad('B118', 'receive(''b20_q/$deadletterqueue/$deadletterqueue'')',
    $$SELECT * FROM sbq_receive('b20_q/$deadletterqueue/$deadletterqueue')$$, '22023');
SELECT * FROM pg_temp.bad('B119', 'receive in a read-only transaction',
    $$SELECT pg_temp.read_only($x$SELECT count(*) FROM sbq_receive('b20_q', 10)$x$)$$, '25006');

-- ------------------------------------------------------------ sbq_peek
SELECT * FROM pg_temp.bad('B120', 'peek(NULL)', $$SELECT * FROM sbq_peek(NULL)$$, '22004');
SELECT * FROM pg_temp.bad('B121', 'peek max_messages NULL', $$SELECT * FROM sbq_peek('b20_q', NULL)$$, '22004');
SELECT * FROM pg_temp.bad('B122', 'peek max_messages 0', $$SELECT * FROM sbq_peek('b20_q', 0)$$, '22023');
SELECT * FROM pg_temp.bad('B123', 'peek max_messages -1', $$SELECT * FROM sbq_peek('b20_q', -1)$$, '22023');
SELECT * FROM pg_temp.bad('B124', 'peek max_messages 5001', $$SELECT * FROM sbq_peek('b20_q', 5001)$$, '22023');
SELECT * FROM pg_temp.bad('B125', 'peek max_messages 2147483647', $$SELECT * FROM sbq_peek('b20_q', 2147483647)$$, '22023');
SELECT * FROM pg_temp.bad('B126', 'peek of an unknown queue', $$SELECT * FROM sbq_peek('b20_nosuch')$$, 'SB001');
SELECT * FROM pg_temp.bad('B127', 'peek(''b20_q#'')', $$SELECT * FROM sbq_peek('b20_q#')$$, '22023');

-- ------------------------------------------------------------ sbq_maintain
SELECT * FROM pg_temp.bad('B128', 'maintain in a read-only transaction',
    $$SELECT pg_temp.read_only('SELECT sbq_maintain()')$$, '25006');
SELECT * FROM pg_temp.bad('B129', 'maintain with an argument (no such function, PostgreSQL)',
    $$SELECT sbq_maintain('b20_q')$$, '42883');

-- ------------------------------------------------------------ intervals judged as a whole, odd names
SELECT * FROM pg_temp.bad('B130', 'create_queue lock_duration ''1 day 30 seconds'' (days count)',
    $$SELECT sbq_create_queue('b20_p', lock_duration => '1 day 30 seconds')$$, '22023');
SELECT * FROM pg_temp.bad('B131', 'create_queue lock_duration ''1 mon 30 seconds'' (months count)',
    $$SELECT sbq_create_queue('b20_p', lock_duration => '1 mon 30 seconds')$$, '22023');
SELECT * FROM pg_temp.bad('B132', 'create_queue lock_duration 4.9999 s (just below 5 s)',
    $$SELECT sbq_create_queue('b20_p', lock_duration => '4.9999 seconds')$$, '22023');
SELECT * FROM pg_temp.bad('B133', 'create_queue lock_duration 5 min + 1 microsecond',
    $$SELECT sbq_create_queue('b20_p', lock_duration => '5 minutes 0.000001 seconds')$$, '22023');
SELECT * FROM pg_temp.bad('B134', 'create_queue duplicate_detection_window ''1 mon'' (above 7 days)',
    $$SELECT sbq_create_queue('b20_p', duplicate_detection_window => '1 mon')$$, '22023');
SELECT * FROM pg_temp.bad('B135', 'create_queue default_message_ttl ''-1 day 1 hour'' (negative as a whole)',
    $$SELECT sbq_create_queue('b20_p', default_message_ttl => '-1 day 1 hour')$$, '22023');
SELECT * FROM pg_temp.bad('B136', 'send with time_to_live ''-1 day 1 hour'' (negative as a whole)',
    $$SELECT sbq_send('b20_q', 'x'::text, time_to_live => '-1 day 1 hour')$$, '22023');
SELECT * FROM pg_temp.bad('B137', 'receive with max_wait ''-1 day 1 second'' (negative as a whole)',
    $$SELECT * FROM sbq_receive('b20_q', 1, '-1 day 1 second')$$, '22023');
SELECT * FROM pg_temp.bad('B138', 'update_queue lock_duration ''1 day 30 seconds''',
    $$SELECT sbq_update_queue('b20_q', lock_duration => '1 day 30 seconds')$$, '22023');
SELECT * FROM pg_temp.bad('B139', 'send to ''b20_q'' followed by a newline',
    $$SELECT sbq_send(E'b20_q\n', 'x'::text)$$, '22023');
SELECT * FROM pg_temp.bad('B140', 'send to ''b20_q/$deadletterqueue '' (trailing space)',
    $$SELECT sbq_send('b20_q/$deadletterqueue ', 'x'::text)$$, '22023');
SELECT * FROM pg_temp.bad('B141', 'send to ''$deadletterqueue'' (no queue)',
    $$SELECT sbq_send('$deadletterqueue', 'x'::text)$$, '22023');
SELECT * FROM pg_temp.bad('B142', 'send to ''b20_q/$deadletterqueuex''',
    $$SELECT sbq_send('b20_q/$deadletterqueuex', 'x'::text)$$, '22023');
SELECT * FROM pg_temp.bad('B143', 'send to the dead-letter path of the 260-character queue (a dead-letter sub-queue, not a bad name)',
    $$SELECT sbq_send(repeat('n', 259) || '9/$deadletterqueue', 'x'::text)$$, 'SB010');

SELECT * FROM pg_temp.bad('B144', 'send with a reply_to_session_id of 129 characters',
    $$SELECT sbq_send('b20_q', 'x'::text, reply_to_session_id => repeat('r', 129))$$, '22023');
SELECT * FROM pg_temp.bad('B145', 'receive from an unknown queue''s dead-letter path',
    $$SELECT * FROM sbq_receive('b20_nosuch/$deadletterqueue')$$, 'SB001');
SELECT * FROM pg_temp.bad('B146', 'peek of an unknown queue''s dead-letter path',
    $$SELECT * FROM sbq_peek('b20_nosuch/$deadletterqueue')$$, 'SB001');

-- ------------------------------------------------------------ huge durations: accepted or 22023, never an overflow
-- API.md sets no upper bound on a time to live; an implementation may accept a huge
-- one (the message practically never expires) or refuse it as out of range (22023).
-- A raw 22008 "timestamp out of range" from computing the expiry is neither, and a
-- queue that accepted its default_message_ttl must then accept sends.
SELECT matches(pg_temp.outcome($$SELECT sbq_send('b20_q', 'x'::text, time_to_live => '1000000 years')$$),
    '^(00000|22023)$', 'B150: send with time_to_live 1000000 years is accepted or refused with 22023 (not 22008)');
SELECT matches(pg_temp.outcome($$SELECT sbq_send('b20_q', 'x'::bytea, time_to_live => '300000 years')$$),
    '^(00000|22023)$', 'B151: send with time_to_live 300000 years is accepted or refused with 22023 (not 22008)');
SELECT matches(pg_temp.outcome($$SELECT sbq_create_queue('b20_long', default_message_ttl => '1000000 years');
                                 SELECT sbq_send('b20_long', 'x'::text)$$),
    '^(00000|22023)$', 'B152: create_queue with default_message_ttl 1000000 years is refused with 22023, or sends to it work');
SELECT matches(pg_temp.outcome($$SELECT sbq_update_queue('b20_q', default_message_ttl => '1000000 years');
                                 SELECT sbq_send('b20_q', '{}'::jsonb)$$),
    '^(00000|22023)$', 'B153: update_queue to default_message_ttl 1000000 years is refused with 22023, or sends work');
SELECT matches(pg_temp.outcome($$SELECT sbq_send('b20_q', 'x'::text, time_to_live => '1 year',
                                                 scheduled_enqueue_time => '294276-12-30 00:00:00+00')$$),
    '^(00000|22023)$', 'B154: a send scheduled in year 294276 with a 1-year TTL is accepted or refused with 22023 (not 22008)');
SELECT is(pg_temp.outcome($$SELECT sbq_send('b20_q', 'x'::text)$$), '00000',
    'C08: the outcome helper reports 00000 for a good send');

-- ------------------------------------------------------------ after everything
SELECT ok(pg_temp.t_intact(), 'B180: table t is intact after all injection attempts');
SELECT is((SELECT array_agg(lower(queue) ORDER BY lower(queue)) FROM sbq_queues WHERE queue LIKE 'b20%'),
    ARRAY['b20_dup', 'b20_q', 'b20_small'],
    'B181: only the fixture queues exist: no bad name was created, no queue dropped');
SELECT is((SELECT array_agg(sequence_number ORDER BY sequence_number) FROM sbq_peek('b20_q', 10)),
    ARRAY[(SELECT v FROM s WHERE k = 'q1'), (SELECT v FROM s WHERE k = 'q2')],
    'B182: b20_q holds exactly its two messages');
SELECT is((SELECT count(*) FROM sbq_peek('b20_small', 10)), 1::bigint,
    'B183: b20_small holds only the 10-byte message');
SELECT is((SELECT coalesce(sbq.lease_until(m.sequence_number), m.locked_until) FROM sbq.messages m
            WHERE m.sequence_number = (SELECT v FROM s WHERE k = 'q1')),
    (SELECT locked_until FROM r), 'B184: q1 still holds the lock of its only delivery');
SELECT is((SELECT delivery_count FROM sbq_peek('b20_q', 1)), 1, 'B184: q1 was delivered once');

SELECT * FROM finish();
ROLLBACK;
