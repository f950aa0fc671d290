-- sbqueue pgTAP: bad input to settling (complete, abandon, defer, deadletter, renew),
-- receive_deferred, cancel_scheduled, resubmit and the dead-letter sub-queue
-- (research/reliability.md 6.5, SQLSTATEs from API.md "Errors"). Continues the case
-- numbers of bad_input.sql at B201 (B310-B314 check the end state). Every case B.. is two assertions: the
-- SQLSTATE, and that no state changed (a fingerprint of every table in schema sbq,
-- all columns, lock columns included, is the same before and after). No sleeps.
BEGIN;
SELECT plan(205);

-- ------------------------------------------------------------ helpers
\ir bad_input_setup.psql

-- ------------------------------------------------------------ fixtures
-- b21_a (max_delivery_count 10):
--   a1 locked (token a1), a2 completed (token a2 stale), a3 deferred, a4 scheduled
--   a day ahead, a6 dead-lettered and locked in the dead-letter sub-queue (token dl6),
--   a7 dead-lettered and unlocked, a5 active and never received.
-- b21_b: b1 locked (token b1), b2 deferred, b3 scheduled, b4 dead-lettered.
-- b21_rd: a message received with receive_and_delete (token NULL) and one left.
DO $$ BEGIN
    PERFORM sbq_create_queue('b21_a');
    PERFORM sbq_create_queue('b21_b');
    PERFORM sbq_create_queue('b21_rd');
END $$;
CREATE TEMP TABLE seq (k text PRIMARY KEY, v bigint);
CREATE TEMP TABLE tok (k text PRIMARY KEY, v uuid);

INSERT INTO seq VALUES ('a1', sbq_send('b21_a', 'a1'::text, message_id => 'a1'));
INSERT INTO tok SELECT 'a1', lock_token FROM sbq_receive('b21_a');
INSERT INTO seq VALUES ('a2', sbq_send('b21_a', 'a2'::text, message_id => 'a2'));
INSERT INTO tok SELECT 'a2', lock_token FROM sbq_receive('b21_a');
DO $$ BEGIN PERFORM sbq_complete('b21_a', (SELECT v FROM tok WHERE k = 'a2')); END $$;
INSERT INTO seq VALUES ('a3', sbq_send('b21_a', 'a3'::text, message_id => 'a3'));
INSERT INTO tok SELECT 'a3', lock_token FROM sbq_receive('b21_a');
DO $$ BEGIN PERFORM sbq_defer('b21_a', (SELECT v FROM tok WHERE k = 'a3')); END $$;
INSERT INTO seq VALUES ('a4', sbq_send('b21_a', 'a4'::text, message_id => 'a4',
                                       scheduled_enqueue_time => now() + interval '1 day'));
INSERT INTO seq VALUES ('a6', sbq_send('b21_a', 'a6'::text, message_id => 'a6'));
INSERT INTO tok SELECT 'a6', lock_token FROM sbq_receive('b21_a');
DO $$ BEGIN PERFORM sbq_deadletter('b21_a', (SELECT v FROM tok WHERE k = 'a6'), 'Fixture', 'dead-lettered by the fixture'); END $$;
INSERT INTO tok SELECT 'dl6', lock_token FROM sbq_receive('b21_a/$deadletterqueue');
INSERT INTO seq VALUES ('a7', sbq_send('b21_a', 'a7'::text, message_id => 'a7'));
INSERT INTO tok SELECT 'a7', lock_token FROM sbq_receive('b21_a');
DO $$ BEGIN PERFORM sbq_deadletter('b21_a', (SELECT v FROM tok WHERE k = 'a7')); END $$;
INSERT INTO seq VALUES ('a5', sbq_send('b21_a', 'a5'::text, message_id => 'a5'));

INSERT INTO seq VALUES ('b1', sbq_send('b21_b', 'b1'::text, message_id => 'b1'));
INSERT INTO tok SELECT 'b1', lock_token FROM sbq_receive('b21_b');
INSERT INTO seq VALUES ('b2', sbq_send('b21_b', 'b2'::text, message_id => 'b2'));
INSERT INTO tok SELECT 'b2', lock_token FROM sbq_receive('b21_b');
DO $$ BEGIN PERFORM sbq_defer('b21_b', (SELECT v FROM tok WHERE k = 'b2')); END $$;
INSERT INTO seq VALUES ('b3', sbq_send('b21_b', 'b3'::text, message_id => 'b3',
                                       scheduled_enqueue_time => now() + interval '1 day'));
INSERT INTO seq VALUES ('b4', sbq_send('b21_b', 'b4'::text, message_id => 'b4'));
INSERT INTO tok SELECT 'b4', lock_token FROM sbq_receive('b21_b');
DO $$ BEGIN PERFORM sbq_deadletter('b21_b', (SELECT v FROM tok WHERE k = 'b4')); END $$;

INSERT INTO seq VALUES ('rd1', sbq_send('b21_rd', 'rd1'::text, message_id => 'rd1'));
INSERT INTO seq VALUES ('rd2', sbq_send('b21_rd', 'rd2'::text, message_id => 'rd2'));
INSERT INTO tok SELECT 'rd', lock_token FROM sbq_receive('b21_rd', 1, '0', 'receive_and_delete');

-- controls: the fixture is what the cases assume
SELECT is((SELECT array_agg(k || '=' || state ORDER BY k) FROM (
              SELECT s.k, p.state FROM sbq_peek('b21_a', 100) p JOIN seq s ON s.v = p.sequence_number) x),
    ARRAY['a1=active', 'a3=deferred', 'a4=scheduled', 'a5=active'],
    'C11: b21_a holds a1 (locked), a3 deferred, a4 scheduled, a5 active');
SELECT is((SELECT array_agg(s.k ORDER BY s.k) FROM sbq_peek('b21_a/$deadletterqueue', 100) p
             JOIN seq s ON s.v = p.sequence_number),
    ARRAY['a6', 'a7'], 'C12: the dead letters of b21_a keep their sequence numbers (a6, a7)');
SELECT ok((SELECT count(*) FROM tok WHERE k IN ('a1', 'a2', 'dl6', 'b1') AND v IS NOT NULL) = 4,
    'C13: the peek-lock receives handed out lock tokens');
SELECT ok((SELECT v IS NULL FROM tok WHERE k = 'rd') AND (SELECT count(*) FROM tok WHERE k = 'rd') = 1,
    'C14: the receive_and_delete receive returned one message whose lock_token is NULL');
SELECT lives_ok($$SELECT sbq_renew('b21_a', (SELECT v FROM tok WHERE k = 'a1'))$$,
    'C15: the a1 token is a valid lock (so the SB002 cases below are about the queue, not the token)');
SELECT lives_ok($$SELECT sbq_renew('b21_a/$deadletterqueue', (SELECT v FROM tok WHERE k = 'dl6'))$$,
    'C16: the dl6 token is a valid lock in the dead-letter sub-queue');

-- ------------------------------------------------------------ sbq_complete(queue, uuid)
SELECT * FROM pg_temp.bad('B201', 'complete(NULL queue, token)',
    $$SELECT sbq_complete(NULL, (SELECT v FROM tok WHERE k = 'a1'))$$, '22004');
SELECT * FROM pg_temp.bad('B202', 'complete(q, NULL::uuid)', $$SELECT sbq_complete('b21_a', NULL::uuid)$$, '22004');
SELECT * FROM pg_temp.bad('B203', 'complete with an unknown token', $$SELECT sbq_complete('b21_a', gen_random_uuid())$$, 'SB002');
SELECT * FROM pg_temp.bad('B204', 'complete with a token of another queue (b21_b''s on b21_a)',
    $$SELECT sbq_complete('b21_a', (SELECT v FROM tok WHERE k = 'b1'))$$, 'SB002');
SELECT * FROM pg_temp.bad('B205', 'complete with a token after complete',
    $$SELECT sbq_complete('b21_a', (SELECT v FROM tok WHERE k = 'a2'))$$, 'SB002');
SELECT * FROM pg_temp.bad('B206', 'complete of a queue message''s token on the dead-letter path',
    $$SELECT sbq_complete('b21_a/$deadletterqueue', (SELECT v FROM tok WHERE k = 'a1'))$$, 'SB002');
SELECT * FROM pg_temp.bad('B207', 'complete of a dead letter''s token on the queue path',
    $$SELECT sbq_complete('b21_a', (SELECT v FROM tok WHERE k = 'dl6'))$$, 'SB002');
SELECT * FROM pg_temp.bad('B208', 'complete of a message received with receive_and_delete (token NULL)',
    $$SELECT sbq_complete('b21_rd', (SELECT v FROM tok WHERE k = 'rd'))$$, '22004');
SELECT * FROM pg_temp.bad('B209', 'complete on an unknown queue',
    $$SELECT sbq_complete('b21_nosuch', (SELECT v FROM tok WHERE k = 'a1'))$$, 'SB001');
SELECT * FROM pg_temp.bad('B210', 'complete on ''b21_a '' (trailing space, never an alias)',
    $$SELECT sbq_complete('b21_a ', (SELECT v FROM tok WHERE k = 'a1'))$$, '22023');
SELECT * FROM pg_temp.bad('B211', 'complete with ''abc''::uuid (uuid input, PostgreSQL)',
    $$SELECT sbq_complete('b21_a', 'abc'::uuid)$$, '22P02');
SELECT * FROM pg_temp.bad('B212', 'complete with a token used on its sender''s queue in upper case after complete',
    $$SELECT sbq_complete('B21_A', (SELECT v FROM tok WHERE k = 'a2'))$$, 'SB002');

-- ------------------------------------------------------------ sbq_complete(queue, uuid[])
SELECT * FROM pg_temp.bad('B213', 'complete(NULL queue, uuid[])',
    $$SELECT sbq_complete(NULL, ARRAY[(SELECT v FROM tok WHERE k = 'a1')])$$, '22004');
SELECT * FROM pg_temp.bad('B214', 'complete(q, NULL::uuid[])', $$SELECT sbq_complete('b21_a', NULL::uuid[])$$, '22004');
SELECT * FROM pg_temp.bad('B215', 'complete(q, uuid[]) with a NULL element beside a valid token',
    $$SELECT sbq_complete('b21_a', ARRAY[(SELECT v FROM tok WHERE k = 'a1'), NULL])$$, '22004');
SELECT * FROM pg_temp.bad('B216', 'complete(q, uuid[]) with a valid and an unknown token (all or nothing)',
    $$SELECT sbq_complete('b21_a', ARRAY[(SELECT v FROM tok WHERE k = 'a1'), gen_random_uuid()])$$, 'SB002');
SELECT * FROM pg_temp.bad('B217', 'complete(q, uuid[]) with a valid token and one of another queue',
    $$SELECT sbq_complete('b21_a', ARRAY[(SELECT v FROM tok WHERE k = 'a1'), (SELECT v FROM tok WHERE k = 'b1')])$$, 'SB002');
SELECT * FROM pg_temp.bad('B218', 'complete(q, uuid[]) with the same valid token twice',
    $$SELECT sbq_complete('b21_a', ARRAY[(SELECT v FROM tok WHERE k = 'a1'), (SELECT v FROM tok WHERE k = 'a1')])$$, 'SB002');
SELECT * FROM pg_temp.bad('B219', 'complete(q, uuid[]) with a valid token and a completed one',
    $$SELECT sbq_complete('b21_a', ARRAY[(SELECT v FROM tok WHERE k = 'a1'), (SELECT v FROM tok WHERE k = 'a2')])$$, 'SB002');
SELECT * FROM pg_temp.bad('B220', 'complete(uuid[]) on an unknown queue',
    $$SELECT sbq_complete('b21_nosuch', ARRAY[(SELECT v FROM tok WHERE k = 'a1')])$$, 'SB001');

-- ------------------------------------------------------------ sbq_abandon
SELECT * FROM pg_temp.bad('B221', 'abandon(NULL queue, token)',
    $$SELECT sbq_abandon(NULL, (SELECT v FROM tok WHERE k = 'a1'))$$, '22004');
SELECT * FROM pg_temp.bad('B222', 'abandon(q, NULL)', $$SELECT sbq_abandon('b21_a', NULL)$$, '22004');
SELECT * FROM pg_temp.bad('B223', 'abandon with an unknown token', $$SELECT sbq_abandon('b21_a', gen_random_uuid())$$, 'SB002');
SELECT * FROM pg_temp.bad('B224', 'abandon with a token of another queue',
    $$SELECT sbq_abandon('b21_b', (SELECT v FROM tok WHERE k = 'a1'))$$, 'SB002');
SELECT * FROM pg_temp.bad('B225', 'abandon with a token after complete',
    $$SELECT sbq_abandon('b21_a', (SELECT v FROM tok WHERE k = 'a2'))$$, 'SB002');
SELECT * FROM pg_temp.bad('B226', 'abandon of a receive_and_delete message (token NULL)',
    $$SELECT sbq_abandon('b21_rd', (SELECT v FROM tok WHERE k = 'rd'))$$, '22004');
SELECT * FROM pg_temp.bad('B227', 'abandon with properties_to_modify a JSON array',
    $$SELECT sbq_abandon('b21_a', (SELECT v FROM tok WHERE k = 'a1'), '[1, 2]')$$, '22023');
SELECT * FROM pg_temp.bad('B228', 'abandon with properties_to_modify a JSON string',
    $$SELECT sbq_abandon('b21_a', (SELECT v FROM tok WHERE k = 'a1'), '"s"')$$, '22023');
SELECT * FROM pg_temp.bad('B229', 'abandon with properties_to_modify a JSON number',
    $$SELECT sbq_abandon('b21_a', (SELECT v FROM tok WHERE k = 'a1'), '7')$$, '22023');
SELECT * FROM pg_temp.bad('B230', 'abandon with properties_to_modify the JSON null literal',
    $$SELECT sbq_abandon('b21_a', (SELECT v FROM tok WHERE k = 'a1'), 'null'::jsonb)$$, '22023');
SELECT * FROM pg_temp.bad('B231', 'abandon on an unknown queue',
    $$SELECT sbq_abandon('b21_nosuch', (SELECT v FROM tok WHERE k = 'a1'))$$, 'SB001');

-- ------------------------------------------------------------ sbq_defer
SELECT * FROM pg_temp.bad('B232', 'defer(NULL queue, token)',
    $$SELECT sbq_defer(NULL, (SELECT v FROM tok WHERE k = 'a1'))$$, '22004');
SELECT * FROM pg_temp.bad('B233', 'defer(q, NULL)', $$SELECT sbq_defer('b21_a', NULL)$$, '22004');
SELECT * FROM pg_temp.bad('B234', 'defer with an unknown token', $$SELECT sbq_defer('b21_a', gen_random_uuid())$$, 'SB002');
SELECT * FROM pg_temp.bad('B235', 'defer with a token of another queue',
    $$SELECT sbq_defer('b21_a', (SELECT v FROM tok WHERE k = 'b1'))$$, 'SB002');
SELECT * FROM pg_temp.bad('B236', 'defer with a token after complete',
    $$SELECT sbq_defer('b21_a', (SELECT v FROM tok WHERE k = 'a2'))$$, 'SB002');
SELECT * FROM pg_temp.bad('B237', 'defer of a receive_and_delete message (token NULL)',
    $$SELECT sbq_defer('b21_rd', (SELECT v FROM tok WHERE k = 'rd'))$$, '22004');
SELECT * FROM pg_temp.bad('B238', 'defer with properties_to_modify a JSON array',
    $$SELECT sbq_defer('b21_a', (SELECT v FROM tok WHERE k = 'a1'), '[]')$$, '22023');
SELECT * FROM pg_temp.bad('B239', 'defer with properties_to_modify the JSON null literal',
    $$SELECT sbq_defer('b21_a', (SELECT v FROM tok WHERE k = 'a1'), 'null'::jsonb)$$, '22023');

-- ------------------------------------------------------------ sbq_deadletter
SELECT * FROM pg_temp.bad('B240', 'deadletter(NULL queue, token)',
    $$SELECT sbq_deadletter(NULL, (SELECT v FROM tok WHERE k = 'a1'))$$, '22004');
SELECT * FROM pg_temp.bad('B241', 'deadletter(q, NULL)', $$SELECT sbq_deadletter('b21_a', NULL, 'r', 'd')$$, '22004');
SELECT * FROM pg_temp.bad('B242', 'deadletter with an unknown token',
    $$SELECT sbq_deadletter('b21_a', gen_random_uuid(), 'r', 'd')$$, 'SB002');
SELECT * FROM pg_temp.bad('B243', 'deadletter with a token of another queue',
    $$SELECT sbq_deadletter('b21_b', (SELECT v FROM tok WHERE k = 'a1'), 'r', 'd')$$, 'SB002');
SELECT * FROM pg_temp.bad('B244', 'deadletter with a token after complete',
    $$SELECT sbq_deadletter('b21_a', (SELECT v FROM tok WHERE k = 'a2'))$$, 'SB002');
SELECT * FROM pg_temp.bad('B245', 'deadletter of a receive_and_delete message (token NULL)',
    $$SELECT sbq_deadletter('b21_rd', (SELECT v FROM tok WHERE k = 'rd'), 'r', 'd')$$, '22004');
SELECT * FROM pg_temp.bad('B246', 'deadletter with a reason of 4097 characters',
    $$SELECT sbq_deadletter('b21_a', (SELECT v FROM tok WHERE k = 'a1'), repeat('r', 4097), 'd')$$, '22023');
SELECT * FROM pg_temp.bad('B247', 'deadletter with an error_description of 4097 characters',
    $$SELECT sbq_deadletter('b21_a', (SELECT v FROM tok WHERE k = 'a1'), 'r', repeat('d', 4097))$$, '22023');
SELECT * FROM pg_temp.bad('B248', 'deadletter with properties_to_modify a JSON string',
    $$SELECT sbq_deadletter('b21_a', (SELECT v FROM tok WHERE k = 'a1'), 'r', 'd', '"s"')$$, '22023');
SELECT * FROM pg_temp.bad('B249', 'deadletter with properties_to_modify the JSON null literal',
    $$SELECT sbq_deadletter('b21_a', (SELECT v FROM tok WHERE k = 'a1'), 'r', 'd', 'null'::jsonb)$$, '22023');
SELECT * FROM pg_temp.bad('B250', 'deadletter of a locked dead letter in b21_a/$deadletterqueue',
    $$SELECT sbq_deadletter('b21_a/$deadletterqueue', (SELECT v FROM tok WHERE k = 'dl6'), 'again', 'd')$$, 'SB010');
SELECT * FROM pg_temp.bad('B251', 'deadletter in B21_A/$DEADLETTERQUEUE (any letter case)',
    $$SELECT sbq_deadletter('B21_A/$DEADLETTERQUEUE', (SELECT v FROM tok WHERE k = 'dl6'))$$, 'SB010');
SELECT * FROM pg_temp.bad('B252', 'deadletter on an unknown queue',
    $$SELECT sbq_deadletter('b21_nosuch', (SELECT v FROM tok WHERE k = 'a1'))$$, 'SB001');

-- ------------------------------------------------------------ sbq_renew
SELECT * FROM pg_temp.bad('B253', 'renew(NULL queue, token)',
    $$SELECT sbq_renew(NULL, (SELECT v FROM tok WHERE k = 'a1'))$$, '22004');
SELECT * FROM pg_temp.bad('B254', 'renew(q, NULL)', $$SELECT sbq_renew('b21_a', NULL)$$, '22004');
SELECT * FROM pg_temp.bad('B255', 'renew with an unknown token', $$SELECT sbq_renew('b21_a', gen_random_uuid())$$, 'SB002');
SELECT * FROM pg_temp.bad('B256', 'renew with a token of another queue',
    $$SELECT sbq_renew('b21_b', (SELECT v FROM tok WHERE k = 'a1'))$$, 'SB002');
SELECT * FROM pg_temp.bad('B257', 'renew with a token after complete',
    $$SELECT sbq_renew('b21_a', (SELECT v FROM tok WHERE k = 'a2'))$$, 'SB002');
SELECT * FROM pg_temp.bad('B258', 'renew of a receive_and_delete message (token NULL)',
    $$SELECT sbq_renew('b21_rd', (SELECT v FROM tok WHERE k = 'rd'))$$, '22004');
SELECT * FROM pg_temp.bad('B259', 'renew of a queue message''s token on the dead-letter path',
    $$SELECT sbq_renew('b21_a/$deadletterqueue', (SELECT v FROM tok WHERE k = 'a1'))$$, 'SB002');
SELECT * FROM pg_temp.bad('B260', 'renew on a name with $ in the middle',
    $$SELECT sbq_renew('b21_a$x', (SELECT v FROM tok WHERE k = 'a1'))$$, '22023');

-- ------------------------------------------------------------ sbq_receive_deferred
SELECT * FROM pg_temp.bad('B261', 'receive_deferred(NULL queue, seqs)',
    format('SELECT * FROM sbq_receive_deferred(NULL, ARRAY[%s]::bigint[])', (SELECT v FROM seq WHERE k = 'a3')), '22004');
SELECT * FROM pg_temp.bad('B262', 'receive_deferred(q, NULL::bigint[])',
    $$SELECT * FROM sbq_receive_deferred('b21_a', NULL)$$, '22004');
SELECT * FROM pg_temp.bad('B263', 'receive_deferred with a NULL element beside a deferred number',
    format('SELECT * FROM sbq_receive_deferred(%L, ARRAY[%s, NULL]::bigint[])', 'b21_a', (SELECT v FROM seq WHERE k = 'a3')), '22004');
SELECT * FROM pg_temp.bad('B264', 'receive_deferred of an active message',
    format('SELECT * FROM sbq_receive_deferred(%L, ARRAY[%s]::bigint[])', 'b21_a', (SELECT v FROM seq WHERE k = 'a5')), 'SB003');
SELECT * FROM pg_temp.bad('B265', 'receive_deferred of a locked message',
    format('SELECT * FROM sbq_receive_deferred(%L, ARRAY[%s]::bigint[])', 'b21_a', (SELECT v FROM seq WHERE k = 'a1')), 'SB003');
SELECT * FROM pg_temp.bad('B266', 'receive_deferred of an unknown sequence number',
    $$SELECT * FROM sbq_receive_deferred('b21_a', ARRAY[9000000000000000000]::bigint[])$$, 'SB003');
SELECT * FROM pg_temp.bad('B267', 'receive_deferred of a scheduled message',
    format('SELECT * FROM sbq_receive_deferred(%L, ARRAY[%s]::bigint[])', 'b21_a', (SELECT v FROM seq WHERE k = 'a4')), 'SB003');
SELECT * FROM pg_temp.bad('B268', 'receive_deferred of a completed message',
    format('SELECT * FROM sbq_receive_deferred(%L, ARRAY[%s]::bigint[])', 'b21_a', (SELECT v FROM seq WHERE k = 'a2')), 'SB003');
SELECT * FROM pg_temp.bad('B269', 'receive_deferred of a dead letter on the queue path',
    format('SELECT * FROM sbq_receive_deferred(%L, ARRAY[%s]::bigint[])', 'b21_a', (SELECT v FROM seq WHERE k = 'a7')), 'SB003');
SELECT * FROM pg_temp.bad('B270', 'receive_deferred of another queue''s deferred message',
    format('SELECT * FROM sbq_receive_deferred(%L, ARRAY[%s]::bigint[])', 'b21_a', (SELECT v FROM seq WHERE k = 'b2')), 'SB003');
SELECT * FROM pg_temp.bad('B271', 'receive_deferred of a deferred and an active message (nothing locked)',
    format('SELECT * FROM sbq_receive_deferred(%L, ARRAY[%s, %s]::bigint[])', 'b21_a',
           (SELECT v FROM seq WHERE k = 'a3'), (SELECT v FROM seq WHERE k = 'a5')), 'SB003');
SELECT * FROM pg_temp.bad('B272', 'receive_deferred of a queue''s deferred message on its dead-letter path',
    format('SELECT * FROM sbq_receive_deferred(%L, ARRAY[%s]::bigint[])', 'b21_a/$deadletterqueue',
           (SELECT v FROM seq WHERE k = 'a3')), 'SB003');
SELECT * FROM pg_temp.bad('B273', 'receive_deferred on an unknown queue',
    format('SELECT * FROM sbq_receive_deferred(%L, ARRAY[%s]::bigint[])', 'b21_nosuch', (SELECT v FROM seq WHERE k = 'a3')), 'SB001');

-- ------------------------------------------------------------ sbq_cancel_scheduled
SELECT * FROM pg_temp.bad('B274', 'cancel_scheduled of an active message',
    format('SELECT sbq_cancel_scheduled(%L, %s)', 'b21_a', (SELECT v FROM seq WHERE k = 'a5')), 'SB003');
SELECT * FROM pg_temp.bad('B275', 'cancel_scheduled of a deferred message',
    format('SELECT sbq_cancel_scheduled(%L, %s)', 'b21_a', (SELECT v FROM seq WHERE k = 'a3')), 'SB003');
SELECT * FROM pg_temp.bad('B276', 'cancel_scheduled of a dead letter',
    format('SELECT sbq_cancel_scheduled(%L, %s)', 'b21_a', (SELECT v FROM seq WHERE k = 'a7')), 'SB003');
SELECT * FROM pg_temp.bad('B277', 'cancel_scheduled of another queue''s scheduled message',
    format('SELECT sbq_cancel_scheduled(%L, %s)', 'b21_a', (SELECT v FROM seq WHERE k = 'b3')), 'SB003');
SELECT * FROM pg_temp.bad('B278', 'cancel_scheduled of an unknown sequence number',
    $$SELECT sbq_cancel_scheduled('b21_a', -1)$$, 'SB003');
SELECT * FROM pg_temp.bad('B279', 'cancel_scheduled(q, NULL)', $$SELECT sbq_cancel_scheduled('b21_a', NULL)$$, '22004');
SELECT * FROM pg_temp.bad('B280', 'cancel_scheduled of a scheduled message on a bad name',
    format('SELECT sbq_cancel_scheduled(%L, %s)', 'b21_a ', (SELECT v FROM seq WHERE k = 'a4')), '22023');

-- ------------------------------------------------------------ sbq_resubmit
SELECT * FROM pg_temp.bad('B281', 'resubmit(NULL)', $$SELECT sbq_resubmit(NULL)$$, '22004');
SELECT * FROM pg_temp.bad('B282', 'resubmit(NULL, seqs)',
    format('SELECT sbq_resubmit(NULL, ARRAY[%s]::bigint[])', (SELECT v FROM seq WHERE k = 'a7')), '22004');
SELECT * FROM pg_temp.bad('B283', 'resubmit of an active message',
    format('SELECT sbq_resubmit(%L, ARRAY[%s]::bigint[])', 'b21_a', (SELECT v FROM seq WHERE k = 'a5')), 'SB003');
SELECT * FROM pg_temp.bad('B284', 'resubmit of a deferred message',
    format('SELECT sbq_resubmit(%L, ARRAY[%s]::bigint[])', 'b21_a', (SELECT v FROM seq WHERE k = 'a3')), 'SB003');
SELECT * FROM pg_temp.bad('B285', 'resubmit of a scheduled message',
    format('SELECT sbq_resubmit(%L, ARRAY[%s]::bigint[])', 'b21_a', (SELECT v FROM seq WHERE k = 'a4')), 'SB003');
SELECT * FROM pg_temp.bad('B286', 'resubmit of an unknown sequence number',
    $$SELECT sbq_resubmit('b21_a', ARRAY[9000000000000000000]::bigint[])$$, 'SB003');
SELECT * FROM pg_temp.bad('B287', 'resubmit of another queue''s dead letter',
    format('SELECT sbq_resubmit(%L, ARRAY[%s]::bigint[])', 'b21_a', (SELECT v FROM seq WHERE k = 'b4')), 'SB003');
SELECT * FROM pg_temp.bad('B288', 'resubmit of a dead letter and an active message (nothing moved)',
    format('SELECT sbq_resubmit(%L, ARRAY[%s, %s]::bigint[])', 'b21_a',
           (SELECT v FROM seq WHERE k = 'a7'), (SELECT v FROM seq WHERE k = 'a5')), 'SB003');
SELECT * FROM pg_temp.bad('B289', 'resubmit with a NULL element beside a dead letter',
    format('SELECT sbq_resubmit(%L, ARRAY[%s, NULL]::bigint[])', 'b21_a', (SELECT v FROM seq WHERE k = 'a7')), '22004');
SELECT * FROM pg_temp.bad('B290', 'resubmit on an unknown queue',
    format('SELECT sbq_resubmit(%L, ARRAY[%s]::bigint[])', 'b21_nosuch', (SELECT v FROM seq WHERE k = 'a7')), 'SB001');

-- ------------------------------------------------------------ stale and forged tokens
-- A token that differs from a valid one in a single hex digit, at either end (the
-- token may carry the sequence number: a forged one must still be refused).
CREATE TEMP TABLE forged AS
SELECT (CASE WHEN left(v::text, 1) = '0' THEN '1' ELSE '0' END || substr(v::text, 2))::uuid AS first_digit,
       (left(v::text, 35) || CASE WHEN right(v::text, 1) = '0' THEN '1' ELSE '0' END)::uuid AS last_digit
  FROM tok WHERE k = 'a1';
SELECT * FROM pg_temp.bad('B296', 'complete with the a1 token changed in its first hex digit',
    $$SELECT sbq_complete('b21_a', (SELECT first_digit FROM forged))$$, 'SB002');
SELECT * FROM pg_temp.bad('B297', 'renew with the a1 token changed in its last hex digit',
    $$SELECT sbq_renew('b21_a', (SELECT last_digit FROM forged))$$, 'SB002');
SELECT * FROM pg_temp.bad('B298', 'complete with the token of a delivery that was deferred',
    $$SELECT sbq_complete('b21_a', (SELECT v FROM tok WHERE k = 'a3'))$$, 'SB002');
SELECT * FROM pg_temp.bad('B299', 'abandon with the token of a delivery that was dead-lettered, on the queue path',
    $$SELECT sbq_abandon('b21_a', (SELECT v FROM tok WHERE k = 'a7'))$$, 'SB002');
SELECT * FROM pg_temp.bad('B300', 'complete with the token of a delivery that was dead-lettered, on the dead-letter path',
    $$SELECT sbq_complete('b21_a/$deadletterqueue', (SELECT v FROM tok WHERE k = 'a7'))$$, 'SB002');
SELECT * FROM pg_temp.bad('B301', 'renew with the queue-side token of a dead letter now locked in the dead-letter sub-queue',
    $$SELECT sbq_renew('b21_a/$deadletterqueue', (SELECT v FROM tok WHERE k = 'a6'))$$, 'SB002');
SELECT * FROM pg_temp.bad('B302', 'defer of a dead letter''s token on the queue path',
    $$SELECT sbq_defer('b21_a', (SELECT v FROM tok WHERE k = 'dl6'))$$, 'SB002');

-- ------------------------------------------------------------ after everything
SELECT is((SELECT array_agg(s.k || '=' || p.state || '/' || p.delivery_count ORDER BY s.k)
             FROM sbq_peek('b21_a', 100) p JOIN seq s ON s.v = p.sequence_number),
    ARRAY['a1=active/1', 'a3=deferred/1', 'a4=scheduled/0', 'a5=active/0'],
    'B310: b21_a is as the fixture left it (no message moved, delivered or dropped)');
SELECT is((SELECT array_agg(s.k ORDER BY s.k) FROM sbq_peek('b21_a/$deadletterqueue', 100) p
             JOIN seq s ON s.v = p.sequence_number),
    ARRAY['a6', 'a7'], 'B311: the dead letters of b21_a are still a6 and a7');
SELECT lives_ok($$SELECT sbq_complete('b21_a', (SELECT v FROM tok WHERE k = 'a1'))$$,
    'B312: after all the failed calls the a1 lock is still valid and completes');
SELECT lives_ok($$SELECT sbq_complete('b21_a/$deadletterqueue', (SELECT v FROM tok WHERE k = 'dl6'))$$,
    'B313: after all the failed calls the dl6 lock is still valid and completes');
SELECT is((SELECT array_agg(message_id ORDER BY sequence_number) FROM sbq_peek('b21_rd', 10)),
    ARRAY['rd2'], 'B314: b21_rd holds only rd2');

SELECT * FROM finish();
ROLLBACK;
