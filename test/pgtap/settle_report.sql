-- sbqueue pgTAP: sbq_settle, the settlement that reports per token (0.9, spec item 5).
-- sbq_settle(queue, lock_tokens uuid[], disposition, reason, error_description,
-- properties_to_modify, delay) returns one row per element of lock_tokens, in the
-- array's order: (lock_token, outcome, locked_until). Every disposition and outcome
-- (completed, abandoned, deferred, dead_lettered, expired, renewed, lock_lost); a
-- repeated token reports lock_lost at its later places; valid tokens are settled beside
-- invalid ones (expired, unknown, settled, another queue's, a released session's);
-- abandon and defer on the last allowed delivery dead-letter; the arguments that do not
-- apply to a disposition are 22023; the whole-call errors (22004, 22023, SB001, SB010,
-- SB007, 42501, 25006) change nothing (pg_temp.bad(), bad_input_setup.psql); the
-- settlement rolls back with the caller's savepoint.
-- Sleeps: to t0 + 1.5 s (time to live of 1 s passes under a 5 s lock), then to t0 + 5.5 s
-- (locks of 5 s expire). Time checks use the wall clock (clock_timestamp()).
BEGIN;
SELECT plan(115);

\ir bad_input_setup.psql

-- ------------------------------------------------------------ helpers
-- The deliveries this file holds, by a name: the message's id, plus a suffix for later
-- deliveries ('n1#2'), '@dl' for a delivery from the dead-letter sub-queue; and made-up
-- tokens ('u1'), so that every token in a result has a name.
CREATE TEMP TABLE tok (k text PRIMARY KEY, q text, seq bigint, v uuid UNIQUE, until timestamptz,
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

-- The rows of the sbq_settle calls, by a name: place in the result (n), the wall clock
-- at the start of the statement (at0) and after the row came (at1).
CREATE TEMP TABLE res (name text, n bigint, lock_token uuid, outcome text, locked_until timestamptz,
                       at0 timestamptz, at1 timestamptz);
-- The statement that runs the sbq_settle(...) call _call and keeps its rows under _name
-- (for lives_ok: a failing call is a failed test, not an aborted file).
CREATE FUNCTION pg_temp.settle(_name text, _call text) RETURNS text LANGUAGE sql AS $$
    SELECT format('INSERT INTO res SELECT %L, x.n, x.lock_token, x.outcome, x.locked_until, '
                  'statement_timestamp(), clock_timestamp() '
                  'FROM %s WITH ORDINALITY AS x(lock_token, outcome, locked_until, n)', _name, _call)
$$;
-- The rows kept under _name, in order, as 'token name:outcome', with ':until' when
-- locked_until is not NULL.
CREATE FUNCTION pg_temp.got(_name text) RETURNS text[] LANGUAGE sql AS $$
    SELECT array_agg(coalesce((SELECT t.k FROM tok t WHERE t.v = r.lock_token), 'not-given') || ':' ||
                     coalesce(r.outcome, 'NULL') || CASE WHEN r.locked_until IS NULL THEN '' ELSE ':until' END
                     ORDER BY r.n)
      FROM res r WHERE r.name = _name
$$;

-- Runs a statement as role _r (reverted with the subtransaction of throws_ok on error).
CREATE FUNCTION pg_temp.as_role(_r name, _sql text) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE format('SET LOCAL ROLE %I', _r);
    EXECUTE _sql;
    RESET ROLE;
END $$;
-- Runs a statement in a read-only transaction state (reverted with the subtransaction).
CREATE FUNCTION pg_temp.read_only(_sql text) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    PERFORM set_config('transaction_read_only', 'on', true);
    EXECUTE _sql;
END $$;

-- ------------------------------------------------------------ fixtures, t0
CREATE ROLE sr_nobody;
DO $$ BEGIN
    PERFORM sbq_create_queue('sr_mix', lock_duration => '5 seconds');
    PERFORM sbq_create_queue('sr_ttl', lock_duration => '5 seconds', default_message_ttl => '1 hour',
                             dead_lettering_on_message_expiration => false);
    PERFORM sbq_create_queue('sr_c');
    PERFORM sbq_create_queue('sr_a');
    PERFORM sbq_create_queue('sr_d');
    PERFORM sbq_create_queue('sr_x');
    PERFORM sbq_create_queue('sr_o');
    PERFORM sbq_create_queue('sr_arg');
    PERFORM sbq_create_queue('sr_m1', max_delivery_count => 1);
    PERFORM sbq_create_queue('sr_m2', max_delivery_count => 2);
    PERFORM sbq_create_queue('sr_small', max_message_size => 64);
    PERFORM sbq_create_queue('sr_s', requires_session => true);
    -- locked for 5 s from t0: e1 expires, v1 and v2 are renewed
    PERFORM pg_temp.take('sr_mix', ARRAY['e1', 'v1', 'v2']);
    -- time to live 1 s, locked for 5 s from t0
    PERFORM sbq_send('sr_ttl', x, message_id => x, time_to_live => '1 second')
       FROM unnest(ARRAY['x1', 'x2', 'x3', 'x4']) x;
    IF pg_temp.grab('sr_ttl') IS DISTINCT FROM ARRAY['x1', 'x2', 'x3', 'x4'] THEN
        RAISE EXCEPTION 'fixture: sr_ttl';
    END IF;
    PERFORM pg_temp.take('sr_c', ARRAY['c1', 'c2', 'c3']);
    PERFORM pg_temp.take('sr_a', ARRAY['a1', 'a2']);
    PERFORM pg_temp.take('sr_d', ARRAY['d1', 'd2']);
    PERFORM pg_temp.take('sr_x', ARRAY['y1', 'y2']);
    PERFORM pg_temp.take('sr_o', ARRAY['o1']);
    PERFORM pg_temp.take('sr_arg', ARRAY['g1', 'g2', 'g3']);
    PERFORM pg_temp.take('sr_m1', ARRAY['m1', 'm2']);
    PERFORM pg_temp.take('sr_m2', ARRAY['n1', 'n2']);
    PERFORM pg_temp.take('sr_small', ARRAY['k1']);
    INSERT INTO tok (k, v) VALUES ('u1', gen_random_uuid()), ('u2', gen_random_uuid());
END $$;
CREATE TEMP TABLE t0 AS SELECT min(until) - interval '5 seconds' AS t FROM tok WHERE q = 'sr_mix';

-- ============================================================ t0 + 1.5 s: expired (time to live)
DO $$ BEGIN PERFORM pg_sleep(greatest(0, extract(epoch FROM (SELECT t FROM t0) + interval '1.5 seconds' - clock_timestamp()))); END $$;
SELECT lives_ok(pg_temp.settle('ttl_a', $$sbq_settle('sr_ttl', ARRAY[pg_temp.t('x1')], 'abandon')$$),
    'SR01: settle abandon of a locked message whose time to live passed runs');
SELECT is(pg_temp.got('ttl_a'), ARRAY['x1:expired'],
    'SR02: abandon of a message whose time to live passed, on a queue that drops expired messages, reports expired');
SELECT lives_ok(pg_temp.settle('ttl_d', $$sbq_settle('sr_ttl', ARRAY[pg_temp.t('x2')], 'defer')$$),
    'SR03: settle defer of a locked message whose time to live passed runs');
SELECT is(pg_temp.got('ttl_d'), ARRAY['x2:expired'],
    'SR04: defer of a message whose time to live passed reports expired');
SELECT lives_ok(pg_temp.settle('ttl_c', $$sbq_settle('sr_ttl', ARRAY[pg_temp.t('x3')], 'complete')$$),
    'SR05: settle complete of a locked message whose time to live passed runs');
SELECT lives_ok(pg_temp.settle('ttl_x', $$sbq_settle('sr_ttl', ARRAY[pg_temp.t('x4')], 'deadletter', 'Mine', 'explicit')$$),
    'SR06: settle deadletter of a locked message whose time to live passed runs');
SELECT is(pg_temp.got('ttl_c') || pg_temp.got('ttl_x'), ARRAY['x3:completed', 'x4:dead_lettered'],
    'SR07: complete and deadletter of such a message report completed and dead_lettered (R4.10)');
SELECT is_empty($$SELECT * FROM sbq_peek('sr_ttl', 10)$$,
    'SR08: the expired messages were dropped from sr_ttl (x3 completed, x4 dead-lettered)');
SELECT is((SELECT array_agg(message_id || ':' || dead_letter_reason) FROM sbq_peek('sr_ttl/$deadletterqueue', 10)),
    ARRAY['x4:Mine'], 'SR09: only the explicitly dead-lettered x4 is a dead letter; the expired ones were dropped');

-- renew (and a repeated token): v1 and v2 now outlive e1
SELECT lives_ok(pg_temp.settle('rn', $$sbq_settle('sr_mix', ARRAY[pg_temp.t('v1'), pg_temp.t('v2'), pg_temp.t('v1')], 'renew')$$),
    'SR10: settle renew of [v1, v2, v1] runs');
SELECT is(pg_temp.got('rn'), ARRAY['v1:renewed:until', 'v2:renewed:until', 'v1:lock_lost'],
    'SR11: renew reports renewed with locked_until for each token, lock_lost (locked_until NULL) at the repeated place');
SELECT ok((SELECT bool_and(locked_until BETWEEN at0 + interval '5 seconds' AND at1 + interval '5 seconds')
             FROM res WHERE name = 'rn' AND outcome = 'renewed'),
    'SR12: the reported locked_until is now + lock_duration (5 s), by the wall clock');
SELECT is((SELECT array_agg(p.locked_until ORDER BY p.sequence_number) FROM sbq_peek('sr_mix', 10) p
            WHERE p.message_id IN ('v1', 'v2')),
    (SELECT array_agg(locked_until ORDER BY n) FROM res WHERE name = 'rn' AND outcome = 'renewed'),
    'SR13: peek shows v1 and v2 locked until the reported times');

-- ============================================================ every disposition
SELECT lives_ok(pg_temp.settle('c', $$sbq_settle('sr_c', pg_temp.ts(ARRAY['c2', 'c1', 'c3']), 'complete')$$),
    'SR14: settle complete of [c2, c1, c3] runs');
SELECT is(pg_temp.got('c'), ARRAY['c2:completed', 'c1:completed', 'c3:completed'],
    'SR15: one row per token in the order of the array, each completed, locked_until NULL');
SELECT is_empty($$SELECT * FROM sbq_peek('sr_c', 10)$$, 'SR16: the completed messages are gone');

SELECT lives_ok(pg_temp.settle('a', $$sbq_settle('sr_a', pg_temp.ts(ARRAY['a2', 'a1', 'a2']), 'abandon',
                                                 properties_to_modify => '{"n": 1}')$$),
    'SR17: settle abandon of [a2, a1, a2] with properties_to_modify runs');
SELECT is(pg_temp.got('a'), ARRAY['a2:abandoned', 'a1:abandoned', 'a2:lock_lost'],
    'SR18: abandoned, abandoned, and lock_lost at the later place of the repeated token');
SELECT is(pg_temp.grab('sr_a', '#2'), ARRAY['a1#2', 'a2#2'], 'SR19: the abandoned messages are received again at once');
SELECT is((SELECT array_agg(k || ':' || dc || ':' || (props ->> 'n') ORDER BY k) FROM tok WHERE k IN ('a1#2', 'a2#2')),
    ARRAY['a1#2:2:1', 'a2#2:2:1'],
    'SR20: each was abandoned once (delivery_count 2, the repeat counted nothing) with its properties merged');

SELECT lives_ok(pg_temp.settle('d', $$sbq_settle('sr_d', pg_temp.ts(ARRAY['d2', 'u1', 'd1']), 'defer',
                                                 properties_to_modify => '{"p": "x"}')$$),
    'SR21: settle defer of [d2, an unknown token, d1] runs');
SELECT is(pg_temp.got('d'), ARRAY['d2:deferred', 'u1:lock_lost', 'd1:deferred'],
    'SR22: deferred, lock_lost for the unknown token, deferred');
SELECT is((SELECT array_agg(message_id || ':' || state || ':' || (application_properties ->> 'p') ORDER BY sequence_number)
             FROM sbq_peek('sr_d', 10)), ARRAY['d1:deferred:x', 'd2:deferred:x'],
    'SR23: both valid tokens'' messages are deferred with the properties merged');

SELECT lives_ok(pg_temp.settle('x', $$sbq_settle('sr_x', pg_temp.ts(ARRAY['y1', 'y2']), 'deadletter', 'Bad', 'bad data',
                                                 '{"z": 1}')$$),
    'SR24: settle deadletter of [y1, y2] with reason, error_description and properties runs');
SELECT is(pg_temp.got('x'), ARRAY['y1:dead_lettered', 'y2:dead_lettered'], 'SR25: both report dead_lettered');
SELECT is((SELECT array_agg(concat_ws(':', message_id, dead_letter_reason, dead_letter_error_description,
                                      application_properties ->> 'z') ORDER BY sequence_number)
             FROM sbq_peek('sr_x/$deadletterqueue', 10)),
    ARRAY['y1:Bad:bad data:1', 'y2:Bad:bad data:1'],
    'SR26: both are dead letters with the reason, description and merged properties');
SELECT is_empty($$SELECT * FROM sbq_peek('sr_x', 10)$$, 'SR27: sr_x is empty');

-- the dead-letter sub-queue
SELECT is(pg_temp.grab('sr_x/$deadletterqueue', '@dl'), ARRAY['y1@dl', 'y2@dl'],
    'SR28: the dead letters are received from sr_x/$deadletterqueue');
SELECT * FROM pg_temp.bad('SR29', 'settle deadletter on the dead-letter sub-queue with valid tokens there',
    $$SELECT * FROM sbq_settle('sr_x/$deadletterqueue', pg_temp.ts(ARRAY['y1@dl', 'y2@dl']), 'deadletter')$$, 'SB010');
SELECT lives_ok(pg_temp.settle('dl_a', $$sbq_settle('sr_x/$deadletterqueue', ARRAY[pg_temp.t('y1@dl')], 'abandon')$$),
    'SR30: settle abandon on the dead-letter sub-queue runs');
SELECT lives_ok(pg_temp.settle('dl_c', $$sbq_settle('sr_x/$deadletterqueue', pg_temp.ts(ARRAY['y2@dl', 'y1@dl']), 'complete')$$),
    'SR31: settle complete on the dead-letter sub-queue runs');
SELECT is(pg_temp.got('dl_a') || pg_temp.got('dl_c'), ARRAY['y1@dl:abandoned', 'y2@dl:completed', 'y1@dl:lock_lost'],
    'SR32: on the dead-letter sub-queue: abandoned; then completed, and lock_lost for the token already abandoned');
SELECT is((SELECT array_agg(message_id) FROM sbq_peek('sr_x/$deadletterqueue', 10)), ARRAY['y1'],
    'SR33: the dead-letter sub-queue holds y1 (abandoned) only');

-- the last allowed delivery
SELECT lives_ok(pg_temp.settle('m1a', $$sbq_settle('sr_m1', ARRAY[pg_temp.t('m1')], 'abandon')$$),
    'SR34: settle abandon on the only allowed delivery runs');
SELECT lives_ok(pg_temp.settle('m1d', $$sbq_settle('sr_m1', ARRAY[pg_temp.t('m2')], 'defer')$$),
    'SR35: settle defer on the only allowed delivery runs');
SELECT is(pg_temp.got('m1a') || pg_temp.got('m1d'), ARRAY['m1:dead_lettered', 'm2:dead_lettered'],
    'SR36: abandon and defer on the last allowed delivery (max_delivery_count 1) report dead_lettered');
SELECT is((SELECT array_agg(message_id || ':' || dead_letter_reason ORDER BY sequence_number)
             FROM sbq_peek('sr_m1/$deadletterqueue', 10)),
    ARRAY['m1:MaxDeliveryCountExceeded', 'm2:MaxDeliveryCountExceeded'],
    'SR37: both were dead-lettered with MaxDeliveryCountExceeded');
SELECT lives_ok(pg_temp.settle('m2a', $$sbq_settle('sr_m2', ARRAY[pg_temp.t('n1')], 'abandon')$$),
    'SR38: settle abandon on delivery 1 of 2 runs');
SELECT lives_ok(pg_temp.settle('m2d', $$sbq_settle('sr_m2', ARRAY[pg_temp.t('n2')], 'defer')$$),
    'SR39: settle defer on delivery 1 of 2 runs');
SELECT is(pg_temp.got('m2a') || pg_temp.got('m2d'), ARRAY['n1:abandoned', 'n2:deferred'],
    'SR40: abandon and defer before the last allowed delivery report abandoned and deferred');
SELECT is(pg_temp.grab('sr_m2', '#2'), ARRAY['n1#2'], 'SR41: n1 is delivered a second time');
INSERT INTO tok (k, q, seq, v, until, dc)
    SELECT message_id || '#2', 'sr_m2', sequence_number, lock_token, locked_until, delivery_count
      FROM sbq_receive_deferred('sr_m2', ARRAY(SELECT seq FROM tok WHERE k = 'n2'));
SELECT lives_ok(pg_temp.settle('m2a2', $$sbq_settle('sr_m2', ARRAY[pg_temp.t('n1#2')], 'abandon')$$),
    'SR42: settle abandon on delivery 2 of 2 runs');
SELECT lives_ok(pg_temp.settle('m2d2', $$sbq_settle('sr_m2', ARRAY[pg_temp.t('n2#2')], 'defer')$$),
    'SR43: settle defer of a deferred message on delivery 2 of 2 runs');
SELECT is(pg_temp.got('m2a2') || pg_temp.got('m2d2'), ARRAY['n1#2:dead_lettered', 'n2#2:dead_lettered'],
    'SR44: abandon and defer on the max_delivery_count-th (2nd) delivery report dead_lettered');
SELECT is((SELECT array_agg(message_id || ':' || dead_letter_reason ORDER BY sequence_number)
             FROM sbq_peek('sr_m2/$deadletterqueue', 10)),
    ARRAY['n1:MaxDeliveryCountExceeded', 'n2:MaxDeliveryCountExceeded'],
    'SR45: both are dead letters with MaxDeliveryCountExceeded');

-- ============================================================ arguments that do not apply: 22023
SELECT * FROM pg_temp.bad('SR46', 'settle with disposition ''bogus''',
    $$SELECT * FROM sbq_settle('sr_arg', pg_temp.ts(ARRAY['g1', 'g2']), 'bogus')$$, '22023');
SELECT * FROM pg_temp.bad('SR47', 'settle with disposition '''' (empty)',
    $$SELECT * FROM sbq_settle('sr_arg', pg_temp.ts(ARRAY['g1', 'g2']), '')$$, '22023');
SELECT * FROM pg_temp.bad('SR48', 'settle with disposition ''completed'' (an outcome, not a disposition)',
    $$SELECT * FROM sbq_settle('sr_arg', pg_temp.ts(ARRAY['g1', 'g2']), 'completed')$$, '22023');
SELECT * FROM pg_temp.bad('SR49', 'settle complete with a reason',
    $$SELECT * FROM sbq_settle('sr_arg', pg_temp.ts(ARRAY['g1']), 'complete', reason => 'r')$$, '22023');
SELECT * FROM pg_temp.bad('SR50', 'settle abandon with an error_description',
    $$SELECT * FROM sbq_settle('sr_arg', pg_temp.ts(ARRAY['g1']), 'abandon', error_description => 'd')$$, '22023');
SELECT * FROM pg_temp.bad('SR51', 'settle renew with a reason',
    $$SELECT * FROM sbq_settle('sr_arg', pg_temp.ts(ARRAY['g1']), 'renew', 'r')$$, '22023');
SELECT * FROM pg_temp.bad('SR52', 'settle defer with a reason',
    $$SELECT * FROM sbq_settle('sr_arg', pg_temp.ts(ARRAY['g1']), 'defer', reason => 'r')$$, '22023');
SELECT * FROM pg_temp.bad('SR53', 'settle complete with properties_to_modify',
    $$SELECT * FROM sbq_settle('sr_arg', pg_temp.ts(ARRAY['g1']), 'complete', properties_to_modify => '{"a": 1}')$$, '22023');
SELECT * FROM pg_temp.bad('SR54', 'settle renew with properties_to_modify',
    $$SELECT * FROM sbq_settle('sr_arg', pg_temp.ts(ARRAY['g1']), 'renew', properties_to_modify => '{"a": 1}')$$, '22023');
SELECT * FROM pg_temp.bad('SR55', 'settle defer with a delay',
    $$SELECT * FROM sbq_settle('sr_arg', pg_temp.ts(ARRAY['g1']), 'defer', delay => '1 second')$$, '22023');
SELECT * FROM pg_temp.bad('SR56', 'settle deadletter with a delay',
    $$SELECT * FROM sbq_settle('sr_arg', pg_temp.ts(ARRAY['g1']), 'deadletter', delay => '1 second')$$, '22023');
SELECT * FROM pg_temp.bad('SR57', 'settle complete with a delay',
    $$SELECT * FROM sbq_settle('sr_arg', pg_temp.ts(ARRAY['g1']), 'complete', delay => '1 second')$$, '22023');
SELECT * FROM pg_temp.bad('SR58', 'settle renew with a delay',
    $$SELECT * FROM sbq_settle('sr_arg', pg_temp.ts(ARRAY['g1']), 'renew', delay => '1 second')$$, '22023');
SELECT * FROM pg_temp.bad('SR59', 'settle abandon with properties_to_modify a JSON array',
    $$SELECT * FROM sbq_settle('sr_arg', pg_temp.ts(ARRAY['g1']), 'abandon', properties_to_modify => '[1]')$$, '22023');

-- ============================================================ whole-call errors
SELECT * FROM pg_temp.bad('SR60', 'settle with a NULL queue',
    $$SELECT * FROM sbq_settle(NULL, pg_temp.ts(ARRAY['g1']), 'complete')$$, '22004');
SELECT * FROM pg_temp.bad('SR61', 'settle with NULL lock_tokens',
    $$SELECT * FROM sbq_settle('sr_arg', NULL, 'complete')$$, '22004');
SELECT * FROM pg_temp.bad('SR62', 'settle with a NULL disposition',
    $$SELECT * FROM sbq_settle('sr_arg', pg_temp.ts(ARRAY['g1']), NULL)$$, '22004');
SELECT * FROM pg_temp.bad('SR63', 'settle complete with a NULL element after valid tokens',
    $$SELECT * FROM sbq_settle('sr_arg', pg_temp.ts(ARRAY['g1', 'g2']) || NULL::uuid, 'complete')$$, '22004');
SELECT * FROM pg_temp.bad('SR64', 'settle complete of 5001 tokens, valid ones first',
    $$SELECT * FROM sbq_settle('sr_arg', pg_temp.ts(ARRAY['g1', 'g2']) || ARRAY(SELECT gen_random_uuid() FROM generate_series(1, 4999)),
                               'complete')$$, '22023');
SELECT * FROM pg_temp.bad('SR65', 'settle on an unknown queue',
    $$SELECT * FROM sbq_settle('sr_nosuch', pg_temp.ts(ARRAY['g1']), 'complete')$$, 'SB001');
SELECT * FROM pg_temp.bad('SR66', 'settle complete by a role without the listen right',
    format('SELECT pg_temp.as_role(%L, %L)', 'sr_nobody',
           format('SELECT count(*) FROM sbq_settle(%L, ARRAY[%L, %L]::uuid[], %L)', 'sr_arg',
                  pg_temp.t('g1'), pg_temp.t('g2'), 'complete')), '42501');
SELECT * FROM pg_temp.bad('SR67', 'settle complete in a read-only transaction',
    $$SELECT pg_temp.read_only(format('SELECT count(*) FROM sbq_settle(%L, ARRAY[%L]::uuid[], %L)', 'sr_arg',
                                      pg_temp.t('g1'), 'complete'))$$, '25006');
SELECT * FROM pg_temp.bad('SR68', 'settle abandon with properties_to_modify that make the message too large',
    $$SELECT * FROM sbq_settle('sr_small', ARRAY[pg_temp.t('k1')], 'abandon',
                               properties_to_modify => jsonb_build_object('big', repeat('x', 200)))$$, 'SB007');
SELECT lives_ok(pg_temp.settle('empty', $$sbq_settle('sr_arg', ARRAY[]::uuid[], 'complete')$$),
    'SR69: settle of an empty array runs');
SELECT is((SELECT count(*) FROM res WHERE name = 'empty'), 0::bigint, 'SR70: settle of an empty array returns no rows');

-- rolls back with the caller's savepoint
SAVEPOINT sr_sp;
SELECT pg_temp.val(format('SELECT string_agg(outcome, %L) FROM sbq_settle(%L, ARRAY[%L]::uuid[], %L)', ',',
                          'sr_arg', pg_temp.t('g3'), 'complete')) AS sp_outcome \gset
ROLLBACK TO SAVEPOINT sr_sp;
SELECT is(:'sp_outcome'::text, 'completed', 'SR71: inside a savepoint settle completed g3');
SELECT lives_ok(pg_temp.settle('arg', $$sbq_settle('sr_arg', pg_temp.ts(ARRAY['g1', 'g2', 'g3']), 'complete')$$),
    'SR72: settle complete of g1, g2, g3 after the failed calls and the rolled-back savepoint runs');
SELECT is(pg_temp.got('arg'), ARRAY['g1:completed', 'g2:completed', 'g3:completed'],
    'SR73: the failed calls changed nothing and the rolled-back settle was undone: all three locks were still valid');
SELECT lives_ok(pg_temp.settle('small', $$sbq_settle('sr_small', ARRAY[pg_temp.t('k1')], 'abandon',
                                                     properties_to_modify => '{"s": 1}')$$),
    'SR74: settle abandon with small properties_to_modify on sr_small runs');
SELECT is(pg_temp.got('small'), ARRAY['k1:abandoned'], 'SR75: the k1 lock survived the SB007 call');

-- ============================================================ a session queue
DO $$ BEGIN
    PERFORM sbq_send('sr_s', 's1', session_id => 'A', message_id => 's1');
    PERFORM sbq_send('sr_s', 's2', session_id => 'A', message_id => 's2');
    PERFORM sbq_send('sr_s', 's3', session_id => 'B', message_id => 's3');
    PERFORM sbq_send('sr_s', 's4', session_id => 'A', message_id => 's4');
END $$;
CREATE TEMP TABLE ses AS SELECT * FROM sbq_accept_session('sr_s', 'A');
INSERT INTO ses SELECT * FROM sbq_accept_session('sr_s', 'B');
INSERT INTO tok (k, q, seq, v, until, dc)
    SELECT message_id, 'sr_s', sequence_number, lock_token, locked_until, delivery_count
      FROM sbq_receive_session('sr_s', (SELECT session_token FROM ses WHERE session_id = 'A'), 10);
INSERT INTO tok (k, q, seq, v, until, dc)
    SELECT message_id, 'sr_s', sequence_number, lock_token, locked_until, delivery_count
      FROM sbq_receive_session('sr_s', (SELECT session_token FROM ses WHERE session_id = 'B'), 10);
SELECT is((SELECT array_agg(k ORDER BY seq) FROM tok WHERE q = 'sr_s'), ARRAY['s1', 's2', 's3', 's4'],
    'SR76: s1, s2, s4 received in session A, s3 in session B');
DO $$ BEGIN PERFORM sbq_release_session('sr_s', (SELECT session_token FROM ses WHERE session_id = 'B')); END $$;
SELECT * FROM pg_temp.bad('SR77', 'settle renew on a queue that requires sessions (valid tokens)',
    $$SELECT * FROM sbq_settle('sr_s', pg_temp.ts(ARRAY['s1', 's2']), 'renew')$$, 'SB010');
SELECT lives_ok(pg_temp.settle('ses', $$sbq_settle('sr_s', pg_temp.ts(ARRAY['s1', 's3', 's2']), 'complete')$$),
    'SR78: settle complete of [s1, s3 (its session released), s2] runs');
SELECT is(pg_temp.got('ses'), ARRAY['s1:completed', 's3:lock_lost', 's2:completed'],
    'SR79: a token whose session lock is not held reports lock_lost; the session''s own are completed');
SELECT lives_ok(pg_temp.settle('sesx', $$sbq_settle('sr_s', ARRAY[pg_temp.t('s4')], 'deadletter', 'SessionBad')$$),
    'SR80: settle deadletter of a message locked in a session runs');
SELECT is(pg_temp.got('sesx'), ARRAY['s4:dead_lettered'], 'SR81: it reports dead_lettered');
SELECT is((SELECT array_agg(message_id) FROM sbq_peek('sr_s', 10)), ARRAY['s3'],
    'SR82: only s3 is left in sr_s');
SELECT is(pg_temp.grab('sr_s/$deadletterqueue', '@dl'), ARRAY['s4@dl'],
    'SR83: s4 is received from the dead-letter sub-queue of the session queue (without a session)');
SELECT lives_ok(pg_temp.settle('sesr', $$sbq_settle('sr_s/$deadletterqueue', ARRAY[pg_temp.t('s4@dl')], 'renew')$$),
    'SR84: settle renew on the dead-letter sub-queue of a session queue runs (its messages have locks of their own)');
SELECT is(pg_temp.got('sesr'), ARRAY['s4@dl:renewed:until'], 'SR85: it reports renewed with locked_until');

-- ============================================================ t0 + 5.5 s: valid, expired, unknown, settled, another queue's
DO $$ BEGIN PERFORM pg_sleep(greatest(0, extract(epoch FROM (SELECT t FROM t0) + interval '5.5 seconds' - clock_timestamp()))); END $$;
SELECT lives_ok(pg_temp.settle('mix', $$sbq_settle('sr_mix', pg_temp.ts(ARRAY['v1', 'e1', 'u2', 'v2', 'o1', 'c1']), 'complete')$$),
    'SR86: settle complete of [valid, expired, unknown, valid, another queue''s, completed] raises nothing');
SELECT is(pg_temp.got('mix'),
    ARRAY['v1:completed', 'e1:lock_lost', 'u2:lock_lost', 'v2:completed', 'o1:lock_lost', 'c1:lock_lost'],
    'SR87: the valid tokens report completed, every other lock_lost, in the array''s order');
SELECT is((SELECT array_agg(message_id) FROM sbq_peek('sr_mix', 10)), ARRAY['e1'],
    'SR88: the valid ones were settled: peek shows only e1 left in sr_mix');
SELECT is((SELECT array_agg(message_id || ':' || delivery_count) FROM sbq_receive('sr_mix', 10)), ARRAY['e1:2'],
    'SR89: e1, whose lock had expired, is received again (delivery_count 2)');
SELECT lives_ok($$SELECT sbq_complete('sr_o', pg_temp.t('o1'))$$,
    'SR90: o1, named on another queue''s settle, is still locked and completes');

SELECT * FROM finish();
ROLLBACK;
