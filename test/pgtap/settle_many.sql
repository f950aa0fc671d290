-- sbqueue pgTAP: settling many messages in one call (0.9, spec items 3 and 4).
-- Item 3: the array forms sbq_abandon/sbq_defer/sbq_deadletter/sbq_renew(queue, uuid[])
-- (and the existing sbq_complete(queue, uuid[])): every token valid settles all and
-- returns the count (renew: the earliest new expiry, NULL for an empty array); any
-- invalid token (unknown, settled, another queue's, the same twice) is SB002 and changes
-- nothing; a NULL element 22004; more than 5000 tokens 22023; per message the semantics
-- of the single forms (max_delivery_count, the dead-letter sub-queue).
-- Item 4: the text forms, chosen for an untyped literal or an untyped driver parameter:
-- one token, or several in array syntax ('{t1,t2}', all or nothing); 22P02 for text
-- that is not a token.
-- A failing call is checked with pg_temp.bad() (bad_input_setup.psql): its SQLSTATE and
-- that nothing changed (every table of schema sbq and the locks in shared memory).
-- No sleeps. Time checks use the wall clock (clock_timestamp()).
BEGIN;
SELECT plan(132);

\ir bad_input_setup.psql

-- ------------------------------------------------------------ helpers
-- The deliveries this file holds, by a name: the message's id, plus a suffix for later
-- deliveries ('a1#2'), or '@dl' for its delivery from the dead-letter sub-queue.
CREATE TEMP TABLE tok (k text PRIMARY KEY, q text, seq bigint, v uuid, until timestamptz,
                       dc integer, props jsonb);

-- Receives (peek-lock) everything available in queue _q, notes each delivery under its
-- message_id || _suffix, and returns those names, sorted.
CREATE FUNCTION pg_temp.grab(_q text, _suffix text DEFAULT '') RETURNS text[]
LANGUAGE plpgsql AS $$
DECLARE
    got text[];
BEGIN
    WITH r AS (SELECT * FROM sbq_receive(_q, 5000)),
         i AS (INSERT INTO tok AS t (k, q, seq, v, until, dc, props)
               SELECT r.message_id || _suffix, _q, r.sequence_number, r.lock_token, r.locked_until,
                      r.delivery_count, r.application_properties
                 FROM r
               ON CONFLICT (k) DO UPDATE SET q = excluded.q, seq = excluded.seq, v = excluded.v,
                                             until = excluded.until, dc = excluded.dc, props = excluded.props
               RETURNING t.k)
    SELECT array_agg(i.k ORDER BY i.k COLLATE "C") INTO got FROM i;
    RETURN got;
END $$;

-- Sends one text message per name (body and message_id the name) and receives them;
-- a fixture step: raises unless exactly those messages came.
CREATE FUNCTION pg_temp.take(_q text, _names text[]) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    x text;
    got text[];
BEGIN
    FOREACH x IN ARRAY _names LOOP
        PERFORM sbq_send(_q, x, message_id => x);
    END LOOP;
    got := pg_temp.grab(_q);
    IF got IS DISTINCT FROM (SELECT array_agg(n ORDER BY n COLLATE "C") FROM unnest(_names) n) THEN
        RAISE EXCEPTION 'fixture: take(%, %) received %', _q, _names, got;
    END IF;
END $$;

\ir settle_setup.psql

-- What peek shows of the messages of a queue: message_id:state:delivery_count, in order.
CREATE FUNCTION pg_temp.peeked(_q text) RETURNS text[] LANGUAGE sql AS $$
    SELECT array_agg(message_id || ':' || state || ':' || delivery_count ORDER BY sequence_number)
      FROM sbq_peek(_q, 100)
$$;

-- ------------------------------------------------------------ fixtures
DO $$ BEGIN
    PERFORM sbq_create_queue('sm_a', lock_duration => '20 seconds');
    PERFORM sbq_create_queue('sm_d', lock_duration => '20 seconds');
    PERFORM sbq_create_queue('sm_x', lock_duration => '20 seconds');
    PERFORM sbq_create_queue('sm_r', lock_duration => '20 seconds');
    PERFORM sbq_create_queue('sm_t', lock_duration => '20 seconds');
    PERFORM sbq_create_queue('sm_o', lock_duration => '20 seconds');
    PERFORM sbq_create_queue('sm_m1', max_delivery_count => 1);
    PERFORM pg_temp.take('sm_a', ARRAY['a1', 'a2', 'a3']);
    PERFORM pg_temp.take('sm_o', ARRAY['o1']);
    PERFORM pg_temp.take('sm_d', ARRAY['d1', 'd2', 'd3']);
    PERFORM pg_temp.take('sm_x', ARRAY['x1', 'x2', 'x3']);
    PERFORM pg_temp.take('sm_r', ARRAY['r1', 'r2']);
    PERFORM pg_temp.take('sm_m1', ARRAY['m1', 'm2', 'm3']);
    PERFORM pg_temp.take('sm_t', ARRAY['t01', 't02', 't03', 't04', 't05', 't06', 't07', 't08', 't09',
                                       't10', 't11', 't12', 't13', 't14', 't15', 't16']);
    -- d3 is settled before the array calls below
    PERFORM sbq_complete('sm_d', pg_temp.t('d3'));
END $$;

-- ============================================================ item 3: sbq_abandon(queue, uuid[])
SELECT * FROM pg_temp.bad('SM01', 'abandon(uuid[]) with two valid tokens and an unknown one (all or nothing)',
    $$SELECT sbq_abandon('sm_a', ARRAY[pg_temp.t('a1'), pg_temp.t('a2'), gen_random_uuid()])$$, 'SB002');
SELECT * FROM pg_temp.bad('SM02', 'abandon(uuid[]) with the same valid token twice',
    $$SELECT sbq_abandon('sm_a', ARRAY[pg_temp.t('a1'), pg_temp.t('a2'), pg_temp.t('a1')])$$, 'SB002');
SELECT * FROM pg_temp.bad('SM03', 'abandon(uuid[]) with a valid token and a valid token of another queue',
    $$SELECT sbq_abandon('sm_a', ARRAY[pg_temp.t('a1'), pg_temp.t('o1')])$$, 'SB002');
SELECT * FROM pg_temp.bad('SM04', 'abandon(uuid[]) with a NULL element between valid tokens',
    $$SELECT sbq_abandon('sm_a', ARRAY[pg_temp.t('a1'), NULL, pg_temp.t('a2')])$$, '22004');
SELECT * FROM pg_temp.bad('SM05', 'abandon(q, NULL::uuid[])', $$SELECT sbq_abandon('sm_a', NULL::uuid[])$$, '22004');
SELECT * FROM pg_temp.bad('SM06', 'abandon(uuid[]) of 5001 tokens, a valid one first',
    $$SELECT sbq_abandon('sm_a', ARRAY[pg_temp.t('a1')] || ARRAY(SELECT gen_random_uuid() FROM generate_series(1, 5000)))$$,
    '22023');
SELECT * FROM pg_temp.bad('SM07', 'abandon(uuid[]) with properties_to_modify a JSON array',
    $$SELECT sbq_abandon('sm_a', ARRAY[pg_temp.t('a1'), pg_temp.t('a2')], '[1]'::jsonb)$$, '22023');
SELECT * FROM pg_temp.bad('SM08', 'abandon(uuid[]) on an unknown queue',
    $$SELECT sbq_abandon('sm_nosuch', ARRAY[pg_temp.t('a1')])$$, 'SB001');
SELECT * FROM pg_temp.bad('SM09', 'abandon(uuid[]) with a NULL queue',
    $$SELECT sbq_abandon(NULL, ARRAY[pg_temp.t('a1')])$$, '22004');
SELECT is(pg_temp.val($$SELECT sbq_abandon('sm_a', ARRAY[]::uuid[])$$), '0',
    'SM10: abandon(uuid[]) of an empty array returns 0');
SELECT is(pg_temp.val($$SELECT sbq_abandon('sm_a', ARRAY[pg_temp.t('a2'), pg_temp.t('a1')], '{"why": "bulk"}')$$), '2',
    'SM11: abandon(uuid[]) of two valid tokens (after the failed calls) returns 2');
SELECT is(pg_temp.grab('sm_a', '#2'), ARRAY['a1#2', 'a2#2'],
    'SM12: a1 and a2 are received again at once; a3 (left out) is still locked');
SELECT is((SELECT array_agg(k || ':' || dc || ':' || coalesce(props ->> 'why', '-') ORDER BY k) FROM tok
            WHERE k IN ('a1#2', 'a2#2')), ARRAY['a1#2:2:bulk', 'a2#2:2:bulk'],
    'SM13: each abandon counted once (delivery_count 2) and merged properties_to_modify');
SELECT * FROM pg_temp.bad('SM14', 'abandon(uuid[]) with the tokens of the deliveries just abandoned',
    $$SELECT sbq_abandon('sm_a', ARRAY[pg_temp.t('a1')])$$, 'SB002');
SELECT is(pg_temp.val($$SELECT sbq_abandon('sm_a', ARRAY[pg_temp.t('a3')])$$), '1',
    'SM15: the a3 lock survived the failed calls it was part of: abandon(uuid[]) of it returns 1');
SELECT is(pg_temp.peeked('sm_a'), ARRAY['a1:active:2', 'a2:active:2', 'a3:active:1'],
    'SM16: sm_a holds a1, a2 (delivered twice) and a3 (abandoned once)');

-- per message as the single form: on the last allowed delivery abandon and defer dead-letter
SELECT is(pg_temp.val($$SELECT sbq_abandon('sm_m1', ARRAY[pg_temp.t('m1'), pg_temp.t('m2')])$$), '2',
    'SM17: abandon(uuid[]) of two messages on their only allowed delivery returns 2');
SELECT is(pg_temp.val($$SELECT sbq_defer('sm_m1', ARRAY[pg_temp.t('m3')])$$), '1',
    'SM18: defer(uuid[]) of a message on its only allowed delivery returns 1');
SELECT is((SELECT array_agg(message_id || ':' || dead_letter_reason ORDER BY sequence_number)
             FROM sbq_peek('sm_m1/$deadletterqueue', 10)),
    ARRAY['m1:MaxDeliveryCountExceeded', 'm2:MaxDeliveryCountExceeded', 'm3:MaxDeliveryCountExceeded'],
    'SM19: abandon(uuid[]) and defer(uuid[]) on the max_delivery_count-th delivery dead-letter each message');
SELECT is_empty($$SELECT * FROM sbq_peek('sm_m1', 10)$$, 'SM20: sm_m1 is empty after those array settlements');

-- ============================================================ item 3: sbq_defer(queue, uuid[])
SELECT * FROM pg_temp.bad('SM21', 'defer(uuid[]) with two valid tokens and a settled one',
    $$SELECT sbq_defer('sm_d', ARRAY[pg_temp.t('d1'), pg_temp.t('d2'), pg_temp.t('d3')])$$, 'SB002');
SELECT * FROM pg_temp.bad('SM22', 'defer(uuid[]) with the same valid token twice',
    $$SELECT sbq_defer('sm_d', ARRAY[pg_temp.t('d2'), pg_temp.t('d2')])$$, 'SB002');
SELECT * FROM pg_temp.bad('SM23', 'defer(uuid[]) with a NULL element after valid tokens',
    $$SELECT sbq_defer('sm_d', ARRAY[pg_temp.t('d1'), pg_temp.t('d2'), NULL])$$, '22004');
SELECT * FROM pg_temp.bad('SM24', 'defer(uuid[]) of 5001 tokens, valid ones among them',
    $$SELECT sbq_defer('sm_d', ARRAY(SELECT gen_random_uuid() FROM generate_series(1, 4999)) || pg_temp.ts(ARRAY['d1', 'd2']))$$,
    '22023');
SELECT * FROM pg_temp.bad('SM25', 'defer(q, NULL::uuid[])', $$SELECT sbq_defer('sm_d', NULL::uuid[])$$, '22004');
SELECT is(pg_temp.val($$SELECT sbq_defer('sm_d', ARRAY[pg_temp.t('d1'), pg_temp.t('d2')], '{"p": 1}')$$), '2',
    'SM26: defer(uuid[]) of two valid tokens returns 2');
SELECT is((SELECT array_agg(message_id || ':' || state || ':' || (application_properties ->> 'p') ORDER BY sequence_number)
             FROM sbq_peek('sm_d', 10)), ARRAY['d1:deferred:1', 'd2:deferred:1'],
    'SM27: both messages are deferred, with properties_to_modify merged');
SELECT is_empty($$SELECT * FROM sbq_receive('sm_d', 10)$$, 'SM28: a receive does not return the deferred messages');
SELECT is((SELECT array_agg(message_id || ':' || delivery_count ORDER BY sequence_number)
             FROM sbq_receive_deferred('sm_d', ARRAY(SELECT seq FROM tok WHERE k IN ('d1', 'd2')))),
    ARRAY['d1:2', 'd2:2'], 'SM29: receive_deferred gets them with delivery_count 2');

-- ============================================================ item 3: sbq_deadletter(queue, uuid[])
SELECT * FROM pg_temp.bad('SM30', 'deadletter(uuid[]) with a valid token and an unknown one',
    $$SELECT sbq_deadletter('sm_x', ARRAY[pg_temp.t('x1'), gen_random_uuid()], 'R', 'D')$$, 'SB002');
SELECT * FROM pg_temp.bad('SM31', 'deadletter(uuid[]) with the same valid token twice',
    $$SELECT sbq_deadletter('sm_x', ARRAY[pg_temp.t('x1'), pg_temp.t('x1')], 'R', 'D')$$, 'SB002');
SELECT * FROM pg_temp.bad('SM32', 'deadletter(uuid[]) with a valid token and one of another queue',
    $$SELECT sbq_deadletter('sm_x', ARRAY[pg_temp.t('x2'), pg_temp.t('o1')])$$, 'SB002');
SELECT * FROM pg_temp.bad('SM33', 'deadletter(uuid[]) with a NULL element',
    $$SELECT sbq_deadletter('sm_x', ARRAY[NULL, pg_temp.t('x1')]::uuid[], 'R', 'D')$$, '22004');
SELECT * FROM pg_temp.bad('SM34', 'deadletter(uuid[]) of 5001 tokens',
    $$SELECT sbq_deadletter('sm_x', ARRAY[pg_temp.t('x1')] || ARRAY(SELECT gen_random_uuid() FROM generate_series(1, 5000)))$$,
    '22023');
SELECT is(pg_temp.val($$SELECT sbq_deadletter('sm_x', ARRAY[pg_temp.t('x2'), pg_temp.t('x1')], 'BulkReason',
                                              'bulk description', '{"z": true}')$$), '2',
    'SM35: deadletter(uuid[]) of two valid tokens returns 2');
SELECT is((SELECT array_agg(concat_ws(':', message_id, dead_letter_reason, dead_letter_error_description,
                                      dead_letter_source, application_properties ->> 'z') ORDER BY sequence_number)
             FROM sbq_peek('sm_x/$deadletterqueue', 10)),
    ARRAY['x1:BulkReason:bulk description:sm_x:true', 'x2:BulkReason:bulk description:sm_x:true'],
    'SM36: both are dead letters with the reason, description, source and merged properties');
SELECT is(pg_temp.peeked('sm_x'), ARRAY['x3:active:1'], 'SM37: only x3 (still locked) is left in sm_x');

-- the dead-letter sub-queue: deadletter is SB010; abandon and complete work
SELECT is(pg_temp.grab('sm_x/$deadletterqueue', '@dl'), ARRAY['x1@dl', 'x2@dl'],
    'SM38: the two dead letters are received from sm_x/$deadletterqueue');
SELECT * FROM pg_temp.bad('SM39', 'deadletter(uuid[]) on the dead-letter sub-queue with valid tokens there',
    $$SELECT sbq_deadletter('sm_x/$deadletterqueue', ARRAY[pg_temp.t('x1@dl'), pg_temp.t('x2@dl')], 'again')$$, 'SB010');
SELECT * FROM pg_temp.bad('SM40', 'abandon(uuid[]) on the dead-letter sub-queue with a valid token there and the queue-side token',
    $$SELECT sbq_abandon('sm_x/$deadletterqueue', ARRAY[pg_temp.t('x1@dl'), pg_temp.t('x3')])$$, 'SB002');
SELECT is(pg_temp.val($$SELECT sbq_abandon('sm_x/$deadletterqueue', ARRAY[pg_temp.t('x1@dl'), pg_temp.t('x2@dl')])$$), '2',
    'SM41: abandon(uuid[]) on the dead-letter sub-queue returns 2');
SELECT is(pg_temp.grab('sm_x/$deadletterqueue', '@dl2'), ARRAY['x1@dl2', 'x2@dl2'],
    'SM42: the abandoned dead letters are received again from the dead-letter sub-queue');
SELECT is(pg_temp.val($$SELECT sbq_complete('sm_x/$deadletterqueue', ARRAY[pg_temp.t('x2@dl2'), pg_temp.t('x1@dl2')])$$), '2',
    'SM43: complete(uuid[]) on the dead-letter sub-queue returns 2');
SELECT is_empty($$SELECT * FROM sbq_peek('sm_x/$deadletterqueue', 10)$$,
    'SM44: the dead-letter sub-queue is empty after the complete');

-- ============================================================ item 3: sbq_renew(queue, uuid[])
SELECT * FROM pg_temp.bad('SM45', 'renew(uuid[]) with a valid token and an unknown one (no lock extended)',
    $$SELECT sbq_renew('sm_r', ARRAY[pg_temp.t('r1'), gen_random_uuid()])$$, 'SB002');
SELECT * FROM pg_temp.bad('SM46', 'renew(uuid[]) with the same valid token twice',
    $$SELECT sbq_renew('sm_r', ARRAY[pg_temp.t('r1'), pg_temp.t('r2'), pg_temp.t('r1')])$$, 'SB002');
SELECT * FROM pg_temp.bad('SM47', 'renew(uuid[]) with a NULL element',
    $$SELECT sbq_renew('sm_r', ARRAY[pg_temp.t('r1'), NULL])$$, '22004');
SELECT * FROM pg_temp.bad('SM48', 'renew(uuid[]) of 5001 tokens',
    $$SELECT sbq_renew('sm_r', pg_temp.ts(ARRAY['r1', 'r2']) || ARRAY(SELECT gen_random_uuid() FROM generate_series(1, 4999)))$$,
    '22023');
SELECT * FROM pg_temp.bad('SM49', 'renew(q, NULL::uuid[])', $$SELECT sbq_renew('sm_r', NULL::uuid[])$$, '22004');
SELECT is(pg_temp.val($$SELECT sbq_renew('sm_r', ARRAY[]::uuid[])$$), NULL,
    'SM50: renew(uuid[]) of an empty array returns NULL');
CREATE TEMP TABLE rn AS
    SELECT clock_timestamp() AS at0,
           pg_temp.val($$SELECT sbq_renew('sm_r', ARRAY[pg_temp.t('r1'), pg_temp.t('r2')])$$) AS until,
           clock_timestamp() AS at1;
SELECT ok((SELECT CASE WHEN until LIKE 'ERROR%' OR until IS NULL THEN false
                       ELSE until::timestamptz BETWEEN at0 + interval '19.95 seconds' AND at1 + interval '20.05 seconds' END
             FROM rn),
    'SM51: renew(uuid[]) returns about now + lock_duration (20 s)');
SELECT is((SELECT min(locked_until)::text FROM sbq_peek('sm_r', 10)),
          (SELECT CASE WHEN until LIKE 'ERROR%' THEN until ELSE until::timestamptz::text END FROM rn),
    'SM52: what renew(uuid[]) returns is the earliest of the renewed locks (peek)');
SELECT ok((SELECT bool_and(locked_until >= at0 + interval '19.95 seconds') FROM sbq_peek('sm_r', 10), rn),
    'SM53: renew(uuid[]) renewed both locks');

-- ============================================================ item 4: text forms, one token
SELECT lives_ok(format('SELECT sbq_complete(%L, %L)', 'sm_t', pg_temp.t('t01')),
    'SM54: complete(q, untyped literal of one token) works without a cast');
SELECT lives_ok(format('SELECT sbq_abandon(%L, %L)', 'sm_t', pg_temp.t('t02')),
    'SM55: abandon(q, untyped literal of one token) resolves without a cast and works');
SELECT lives_ok(format('SELECT sbq_defer(%L, %L)', 'sm_t', pg_temp.t('t03')),
    'SM56: defer(q, untyped literal of one token) works without a cast');
SELECT lives_ok(format('SELECT sbq_deadletter(%L, %L, %L, %L)', 'sm_t', pg_temp.t('t04'), 'TextOne', 'one token'),
    'SM57: deadletter(q, untyped literal of one token, reason, description) works without a cast');
CREATE TEMP TABLE rt1 AS
    SELECT clock_timestamp() AS at0,
           pg_temp.val(format('SELECT sbq_renew(%L, %L)', 'sm_t', pg_temp.t('t05'))) AS until,
           clock_timestamp() AS at1;
SELECT ok((SELECT CASE WHEN until LIKE 'ERROR%' OR until IS NULL THEN false
                       ELSE until::timestamptz BETWEEN at0 + interval '19.95 seconds' AND at1 + interval '20.05 seconds' END
             FROM rt1),
    'SM58: renew(q, untyped literal of one token) returns about now + lock_duration');
SELECT throws_ok(format('SELECT sbq_abandon(%L, %L)', 'sm_t', gen_random_uuid()), 'SB002', NULL,
    'SM59: abandon(q, untyped literal of an unknown token) resolves without a cast and fails with SB002');

-- ============================================================ item 4: text forms, array syntax
SELECT lives_ok(format('SELECT sbq_abandon(%L, %L)', 'sm_t', pg_temp.lit(ARRAY['t06', 't07'])),
    'SM60: abandon(q, ''{t1,t2}'') settles the tokens in array syntax');
SELECT lives_ok(format('SELECT sbq_defer(%L, %L, %L)', 'sm_t', pg_temp.lit(ARRAY['t08', 't09']), '{"d": 1}'),
    'SM61: defer(q, ''{t1,t2}'', properties_to_modify) settles the tokens in array syntax');
SELECT lives_ok(format('SELECT sbq_deadletter(%L, %L, %L, %L)', 'sm_t', pg_temp.lit(ARRAY['t10', 't11']), 'TextMany', 'two tokens'),
    'SM62: deadletter(q, ''{t1,t2}'', reason, description) settles the tokens in array syntax');
SELECT lives_ok(format('SELECT sbq_complete(%L, %L)', 'sm_t', pg_temp.lit(ARRAY['t12', 't13'])),
    'SM63: complete(q, ''{t1,t2}'') settles the tokens in array syntax');
CREATE TEMP TABLE rt2 AS
    SELECT clock_timestamp() AS at0,
           pg_temp.val(format('SELECT sbq_renew(%L, %L)', 'sm_t', pg_temp.lit(ARRAY['t14', 't05']))) AS until,
           clock_timestamp() AS at1;
SELECT ok((SELECT CASE WHEN until LIKE 'ERROR%' OR until IS NULL THEN false
                       ELSE until::timestamptz BETWEEN at0 + interval '19.95 seconds' AND at1 + interval '20.05 seconds' END
             FROM rt2),
    'SM64: renew(q, ''{t1,t2}'') returns about now + lock_duration');
SELECT is((SELECT array_agg(message_id || ':' || state ORDER BY sequence_number) FROM sbq_peek('sm_t', 100)),
    ARRAY['t02:active', 't03:deferred', 't05:active', 't06:active', 't07:active', 't08:deferred', 't09:deferred',
          't14:active', 't15:active', 't16:active'],
    'SM65: after the text-form settlements sm_t holds what they left (t01, t12, t13 completed; t04, t10, t11 dead-lettered)');
SELECT is((SELECT array_agg(message_id || ':' || dead_letter_reason || ':' || dead_letter_error_description
                            ORDER BY sequence_number) FROM sbq_peek('sm_t/$deadletterqueue', 100)),
    ARRAY['t04:TextOne:one token', 't10:TextMany:two tokens', 't11:TextMany:two tokens'],
    'SM66: the text-form deadletters moved t04, t10, t11 with their reason and description');
SELECT is((SELECT array_agg(message_id || ':' || (application_properties ->> 'd')) FROM sbq_peek('sm_t', 100)
            WHERE state = 'deferred' AND application_properties ? 'd'),
    ARRAY['t08:1', 't09:1'], 'SM67: defer in array syntax merged properties_to_modify into both messages');
SELECT is(pg_temp.grab('sm_t', '#2'), ARRAY['t02#2', 't06#2', 't07#2'],
    'SM68: the messages abandoned through the text forms are received again at once (t05, t14 renewed, still locked)');
SELECT is((SELECT array_agg(dc ORDER BY k) FROM tok WHERE k IN ('t02#2', 't06#2', 't07#2')), ARRAY[2, 2, 2],
    'SM69: with delivery_count 2');

-- all or nothing, and what is not a token
SELECT * FROM pg_temp.bad('SM70', 'complete(q, text) in array syntax with a valid token and an unknown one',
    format('SELECT sbq_complete(%L, %L)', 'sm_t', '{' || pg_temp.t('t15') || ',' || gen_random_uuid() || '}'), 'SB002');
SELECT * FROM pg_temp.bad('SM71', 'abandon(q, text) in array syntax with the same valid token twice',
    format('SELECT sbq_abandon(%L, %L)', 'sm_t', pg_temp.lit(ARRAY['t15', 't16', 't15'])), 'SB002');
SELECT * FROM pg_temp.bad('SM72', 'defer(q, text) in array syntax with a valid token and a completed one',
    format('SELECT sbq_defer(%L, %L)', 'sm_t', pg_temp.lit(ARRAY['t15', 't01'])), 'SB002');
SELECT * FROM pg_temp.bad('SM73', 'renew(q, text) in array syntax with a valid token and one of another queue',
    format('SELECT sbq_renew(%L, %L)', 'sm_t', pg_temp.lit(ARRAY['t15', 'x3'])), 'SB002');
SELECT * FROM pg_temp.bad('SM74', 'deadletter(q, text) in array syntax with a valid token and an abandoned delivery''s',
    format('SELECT sbq_deadletter(%L, %L, %L)', 'sm_t', pg_temp.lit(ARRAY['t16', 't02']), 'r'), 'SB002');
SELECT * FROM pg_temp.bad('SM75', 'complete(q, text) in array syntax with a NULL element',
    format('SELECT sbq_complete(%L, %L)', 'sm_t', '{' || pg_temp.t('t15') || ',NULL}'), '22004');
SELECT * FROM pg_temp.bad('SM76', 'complete(q, ''not-a-token'')', $$SELECT sbq_complete('sm_t', 'not-a-token')$$, '22P02');
SELECT * FROM pg_temp.bad('SM77', 'abandon(q, ''xyz'')', $$SELECT sbq_abandon('sm_t', 'xyz')$$, '22P02');
SELECT * FROM pg_temp.bad('SM78', 'defer(q, ''12345'')', $$SELECT sbq_defer('sm_t', '12345')$$, '22P02');
SELECT * FROM pg_temp.bad('SM79', 'deadletter(q, ''nope'', reason, description)',
    $$SELECT sbq_deadletter('sm_t', 'nope', 'r', 'd')$$, '22P02');
SELECT * FROM pg_temp.bad('SM80', 'renew(q, ''nope'')', $$SELECT sbq_renew('sm_t', 'nope')$$, '22P02');
SELECT * FROM pg_temp.bad('SM81', 'abandon(q, text) in array syntax with a valid token and a non-token',
    format('SELECT sbq_abandon(%L, %L)', 'sm_t', '{' || pg_temp.t('t15') || ',nope}'), '22P02');
SELECT * FROM pg_temp.bad('SM82', 'complete(q, text) with an unterminated array of a valid token',
    format('SELECT sbq_complete(%L, %L)', 'sm_t', '{' || pg_temp.t('t15')), '22P02');
SELECT * FROM pg_temp.bad('SM83', 'abandon(q, NULL::text)', $$SELECT sbq_abandon('sm_t', NULL::text)$$, '22004');
SELECT * FROM pg_temp.bad('SM84', 'deadletter(q, text) in array syntax on the dead-letter sub-queue',
    format('SELECT sbq_deadletter(%L, %L)', 'sm_x/$deadletterqueue', '{' || gen_random_uuid() || '}'), 'SB010');

-- untyped driver parameters: a prepared statement without parameter types, as node's pg
-- and psycopg send strings and lists of strings
PREPARE sm_complete AS SELECT sbq_complete($1, $2);
PREPARE sm_abandon AS SELECT sbq_abandon($1, $2);
SELECT lives_ok(format('EXECUTE sm_abandon(%L, %L)', 'sm_t', pg_temp.lit(ARRAY['t02#2', 't06#2'])),
    'SM85: abandon($1, $2) with untyped parameters and a list of tokens in array syntax works');
SELECT lives_ok(format('EXECUTE sm_complete(%L, %L)', 'sm_t', pg_temp.t('t07#2')),
    'SM86: complete($1, $2) with untyped parameters and one token works');
SELECT is((SELECT array_agg(message_id || ':' || state || ':' || delivery_count ORDER BY sequence_number)
             FROM sbq_peek('sm_t', 100) WHERE message_id IN ('t02', 't06', 't07')),
    ARRAY['t02:active:2', 't06:active:2'],
    'SM87: the prepared calls abandoned t02, t06 and completed t07');
DEALLOCATE sm_complete;
DEALLOCATE sm_abandon;

-- ------------------------------------------------------------ after everything
SELECT lives_ok($$SELECT sbq_complete('sm_t', ARRAY[pg_temp.t('t15'), pg_temp.t('t16')])$$,
    'SM88: t15 and t16, part of every failed text-form call, are still locked and complete');
SELECT lives_ok($$SELECT sbq_complete('sm_o', pg_temp.t('o1'))$$,
    'SM89: o1, named in calls on other queues, is still locked and completes');
SELECT lives_ok($$SELECT sbq_complete('sm_x', pg_temp.t('x3'))$$,
    'SM90: x3, named in failed calls, is still locked and completes');

SELECT * FROM finish();
ROLLBACK;
