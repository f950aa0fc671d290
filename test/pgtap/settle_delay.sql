-- sbqueue pgTAP: abandon with a delay (0.9, spec item 6).
-- sbq_abandon(..., delay interval DEFAULT NULL), in its single, array and text forms and
-- as sbq_settle's delay: with a delay > 0 the message is released but not receivable
-- (by sbq_receive, or a waiting receive) until now + delay; sbq_peek shows it with
-- locked_until = that time and lock_token NULL, delivery_count as after an abandon;
-- sbq_queue_stats counts it as locked. NULL or '0': available at once. Negative: 22023.
-- On the last allowed delivery the abandon dead-letters (the delay ignored). On a queue
-- that requires sessions a delay > 0 is SB010, not on its dead-letter sub-queue. A
-- deferred message abandoned with a delay stays deferred.
-- Failing calls: pg_temp.bad() (bad_input_setup.psql), the SQLSTATE and nothing changed.
-- Sleeps: a receive waiting 0.5 s, a receive waiting up to 3 s (returns after about 1 s), then to 2.2 s after
-- the abandons. Time checks use the wall clock (clock_timestamp()).
BEGIN;
SELECT plan(80);

\ir bad_input_setup.psql

-- ------------------------------------------------------------ helpers
CREATE TEMP TABLE tok (k text PRIMARY KEY, q text, seq bigint, v uuid, until timestamptz,
                       dc integer, props jsonb);

-- Receives (peek-lock) everything available in queue _q, notes each delivery under its
-- message_id || _suffix, and returns 'name:delivery_count' of each, sorted.
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
               RETURNING t.k, t.dc)
    SELECT array_agg(i.k || ':' || i.dc ORDER BY i.k COLLATE "C") INTO got FROM i;
    RETURN got;
END $$;

-- Sends one text message per name and receives them (a fixture step: raises unless
-- exactly those messages came, each on its first delivery).
CREATE FUNCTION pg_temp.take(_q text, _names text[]) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    x text;
    got text[];
BEGIN
    FOREACH x IN ARRAY _names LOOP
        PERFORM sbq_send(_q, x, message_id => x);
    END LOOP;
    got := pg_temp.grab(_q);
    IF got IS DISTINCT FROM (SELECT array_agg(n || ':1' ORDER BY n COLLATE "C") FROM unnest(_names) n) THEN
        RAISE EXCEPTION 'fixture: take(%, %) received %', _q, _names, got;
    END IF;
END $$;

\ir settle_setup.psql

-- Runs statements and always rolls them back; returns the SQLSTATE they failed with,
-- or 00000 when they all succeeded (as bad_input.sql does).
CREATE FUNCTION pg_temp.outcome(_sql text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    BEGIN
        EXECUTE _sql;
        RAISE SQLSTATE 'ZZ999';
    EXCEPTION WHEN OTHERS THEN
        RETURN CASE WHEN SQLSTATE = 'ZZ999' THEN '00000' ELSE SQLSTATE END;
    END;
END $$;

-- pg_temp.val(), noting the wall clock before and after the call under _k.
CREATE TEMP TABLE tm (k text PRIMARY KEY, at0 timestamptz, at1 timestamptz);
CREATE FUNCTION pg_temp.timed(_k text, _sql text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    t0 timestamptz := clock_timestamp();
    r text;
BEGIN
    r := pg_temp.val(_sql);
    INSERT INTO tm VALUES (_k, t0, clock_timestamp());
    RETURN r;
END $$;

-- Whether peek shows message _m of queue _q locked until _delay after the call noted
-- under _k (lock_token NULL), or what it shows instead.
CREATE FUNCTION pg_temp.delayed(_q text, _m text, _k text, _delay interval) RETURNS text
LANGUAGE sql AS $$
    SELECT coalesce((SELECT CASE WHEN p.lock_token IS NULL
                                  AND p.locked_until BETWEEN tm.at0 + _delay AND tm.at1 + _delay
                                 THEN 'locked until now + delay'
                                 ELSE format('lock_token %s, locked_until %s (call at %s .. %s)',
                                             p.lock_token, p.locked_until, tm.at0, tm.at1) END
                       FROM sbq_peek(_q, 100) p, tm WHERE p.message_id = _m AND tm.k = _k),
                    'not found')
$$;

-- sbq_settle's rows under a name (see settle_report.sql).
CREATE TEMP TABLE res (name text, n bigint, lock_token uuid, outcome text, locked_until timestamptz,
                       at0 timestamptz, at1 timestamptz);
CREATE FUNCTION pg_temp.settle(_name text, _call text) RETURNS text LANGUAGE sql AS $$
    SELECT format('INSERT INTO res SELECT %L, x.n, x.lock_token, x.outcome, x.locked_until, '
                  'statement_timestamp(), clock_timestamp() '
                  'FROM %s WITH ORDINALITY AS x(lock_token, outcome, locked_until, n)', _name, _call)
$$;

-- ------------------------------------------------------------ fixtures
DO $$ BEGIN
    PERFORM sbq_create_queue('sd_q', lock_duration => '20 seconds');
    PERFORM sbq_create_queue('sd_w', lock_duration => '20 seconds');
    PERFORM sbq_create_queue('sd_z');
    PERFORM sbq_create_queue('sd_arr');
    PERFORM sbq_create_queue('sd_txt');
    PERFORM sbq_create_queue('sd_set');
    PERFORM sbq_create_queue('sd_d');
    PERFORM sbq_create_queue('sd_neg');
    PERFORM sbq_create_queue('sd_m1', max_delivery_count => 1);
    PERFORM sbq_create_queue('sd_m2', max_delivery_count => 2);
    PERFORM sbq_create_queue('sd_s', requires_session => true);
    PERFORM pg_temp.take('sd_q', ARRAY['a1', 'a2']);
    PERFORM pg_temp.take('sd_w', ARRAY['w1']);
    PERFORM pg_temp.take('sd_z', ARRAY['z1', 'z2']);
    PERFORM pg_temp.take('sd_arr', ARRAY['g1', 'g2']);
    PERFORM pg_temp.take('sd_txt', ARRAY['h1', 'h2', 'h3']);
    PERFORM pg_temp.take('sd_set', ARRAY['k1']);
    PERFORM pg_temp.take('sd_d', ARRAY['f1']);
    PERFORM pg_temp.take('sd_neg', ARRAY['n1', 'n2']);
    PERFORM pg_temp.take('sd_m1', ARRAY['m1', 'm2']);
    PERFORM pg_temp.take('sd_m2', ARRAY['q1']);
    -- f1: deferred, then received by sequence number (delivery 2)
    PERFORM sbq_defer('sd_d', pg_temp.t('f1'));
    INSERT INTO tok (k, q, seq, v, until, dc)
        SELECT message_id || '#2', 'sd_d', sequence_number, lock_token, locked_until, delivery_count
          FROM sbq_receive_deferred('sd_d', ARRAY(SELECT seq FROM tok WHERE k = 'f1'));
    -- sd_s: s1 locked in session A; s2 dead-lettered, then locked in the dead-letter sub-queue
    PERFORM sbq_send('sd_s', 's1', session_id => 'A', message_id => 's1');
    PERFORM sbq_send('sd_s', 's2', session_id => 'A', message_id => 's2');
    INSERT INTO tok (k, q, seq, v, until, dc)
        SELECT message_id, 'sd_s', sequence_number, lock_token, locked_until, delivery_count
          FROM sbq_receive_session('sd_s', (SELECT session_token FROM sbq_accept_session('sd_s', 'A')), 10);
    PERFORM sbq_deadletter('sd_s', pg_temp.t('s2'), 'Fixture');
    IF (SELECT array_agg(split_part(x, ':', 1)) FROM unnest(pg_temp.grab('sd_s/$deadletterqueue', '@dl')) x)
       IS DISTINCT FROM ARRAY['s2@dl'] THEN
        RAISE EXCEPTION 'fixture: sd_s/$deadletterqueue';
    END IF;
END $$;

SELECT has_function('sbq_abandon', ARRAY['text', 'uuid', 'jsonb', 'interval'],
    'SD01: sbq_abandon(text, uuid, jsonb, interval) exists');
SELECT hasnt_function('sbq_abandon', ARRAY['text', 'uuid', 'jsonb'],
    'SD02: the 0.8 sbq_abandon(text, uuid, jsonb) is gone (replaced by the form with the delay)');

-- ============================================================ the abandons with a delay (t = 0)
SELECT is(pg_temp.timed('a2', $$SELECT 'done' FROM sbq_abandon('sd_q', pg_temp.t('a2'))$$), 'done',
    'SD03: abandon of a2 without a delay (the control)');
SELECT is(pg_temp.timed('a1', $$SELECT 'done' FROM sbq_abandon('sd_q', pg_temp.t('a1'), delay => '2 seconds')$$), 'done',
    'SD04: abandon of a1 with delay 2 seconds');
SELECT is(pg_temp.timed('w1', $$SELECT 'done' FROM sbq_abandon('sd_w', pg_temp.t('w1'), NULL, '1 second')$$), 'done',
    'SD05: abandon of w1 with delay 1 second (positional)');
SELECT is(pg_temp.timed('g', $$SELECT sbq_abandon('sd_arr', pg_temp.ts(ARRAY['g1', 'g2']), '{"e": 1}', '2 seconds')$$), '2',
    'SD06: abandon(uuid[]) of g1, g2 with properties_to_modify and delay 2 seconds returns 2');
SELECT is(pg_temp.timed('h1', format('SELECT %L FROM sbq_abandon(%L, %L, delay => %L)', 'done', 'sd_txt',
                                     pg_temp.t('h1'), '2 seconds')), 'done',
    'SD07: abandon(q, untyped token literal, delay => untyped literal) with 2 seconds');
SELECT is(pg_temp.timed('h23', format('SELECT %L FROM sbq_abandon(%L, %L, NULL, %L)', 'done', 'sd_txt',
                                      pg_temp.lit(ARRAY['h2', 'h3']), '2 seconds')), 'done',
    'SD08: abandon(q, ''{t1,t2}'', NULL, ''2 seconds'') (text form in array syntax)');
SELECT is(pg_temp.timed('q1', $$SELECT 'done' FROM sbq_abandon('sd_m2', pg_temp.t('q1'), delay => '1 second')$$), 'done',
    'SD08b: abandon of q1 (delivery 1 of 2) with delay 1 second');
SELECT lives_ok(pg_temp.settle('k', $$sbq_settle('sd_set', ARRAY[pg_temp.t('k1')], 'abandon', delay => '2 seconds')$$),
    'SD09: sbq_settle(..., ''abandon'', delay => ''2 seconds'') runs');
SELECT is((SELECT array_agg(outcome || ':' || coalesce(locked_until::text, 'NULL')) FROM res WHERE name = 'k'),
    ARRAY['abandoned:NULL'], 'SD10: it reports abandoned with locked_until NULL');
SELECT is(pg_temp.timed('f1', $$SELECT 'done' FROM sbq_abandon('sd_d', pg_temp.t('f1#2'), delay => '1 second')$$), 'done',
    'SD11: abandon of a received deferred message with delay 1 second');
SELECT is(pg_temp.timed('s2', $$SELECT 'done' FROM sbq_abandon('sd_s/$deadletterqueue', pg_temp.t('s2@dl'), delay => '2 seconds')$$),
    'done', 'SD12: abandon with delay 2 seconds on the dead-letter sub-queue of a session queue is accepted');

-- ============================================================ right after
SELECT is(pg_temp.delayed('sd_q', 'a1', 'a1', '2 seconds'), 'locked until now + delay',
    'SD13: peek shows a1 with locked_until = the time of the abandon + 2 s and lock_token NULL');
SELECT is((SELECT array_agg(message_id || ':' || delivery_count ORDER BY sequence_number) FROM sbq_peek('sd_q', 10)),
    ARRAY['a1:1', 'a2:1'],
    'SD14: a1''s delivery_count is as after an abandon: the same as a2''s, abandoned without a delay');
SELECT is((SELECT ARRAY[active_count, locked_count, deferred_count] FROM sbq_queue_stats WHERE queue = 'sd_q'),
    ARRAY[1, 1, 0]::bigint[], 'SD15: sbq_queue_stats counts a1 as locked and a2 as active');
SELECT is(pg_temp.grab('sd_q', '#2'), ARRAY['a2#2:2'],
    'SD16: a receive gets a2 (delivery_count 2) but not a1');
SELECT * FROM pg_temp.bad('SD17', 'complete with the token of the delivery abandoned with a delay',
    $$SELECT sbq_complete('sd_q', pg_temp.t('a1'))$$, 'SB002');
SELECT * FROM pg_temp.bad('SD18', 'abandon with the token of the delivery abandoned with a delay',
    $$SELECT sbq_abandon('sd_q', pg_temp.t('a1'))$$, 'SB002');
SELECT * FROM pg_temp.bad('SD18b', 'renew with the token of the delivery abandoned with a delay',
    $$SELECT sbq_renew('sd_q', pg_temp.t('a1'))$$, 'SB002');
SELECT is(pg_temp.val($$SELECT string_agg(outcome, ',') FROM sbq_settle('sd_q', ARRAY[pg_temp.t('a1')], 'complete')$$),
    'lock_lost', 'SD18c: sbq_settle complete with the token of the delivery abandoned with a delay reports lock_lost');

SELECT is_empty($$SELECT * FROM sbq_receive('sd_arr', 10, '0', 'receive_and_delete')$$,
    'SD19: abandon(uuid[]) with a delay: nothing receivable at once, not even by receive_and_delete');
SELECT is(ARRAY[pg_temp.delayed('sd_arr', 'g1', 'g', '2 seconds'), pg_temp.delayed('sd_arr', 'g2', 'g', '2 seconds')],
    ARRAY['locked until now + delay', 'locked until now + delay'],
    'SD20: peek shows g1 and g2 locked until the time of the abandon + 2 s');
SELECT is((SELECT array_agg(application_properties ->> 'e') FROM sbq_peek('sd_arr', 10)), ARRAY['1', '1'],
    'SD21: properties_to_modify was merged into both');
SELECT is_empty($$SELECT * FROM sbq_receive('sd_txt', 10)$$, 'SD22: text forms with a delay: nothing receivable at once');
SELECT is(ARRAY[pg_temp.delayed('sd_txt', 'h1', 'h1', '2 seconds'), pg_temp.delayed('sd_txt', 'h2', 'h23', '2 seconds'),
                pg_temp.delayed('sd_txt', 'h3', 'h23', '2 seconds')],
    ARRAY['locked until now + delay', 'locked until now + delay', 'locked until now + delay'],
    'SD23: peek shows h1, h2, h3 locked until the time of their abandon + 2 s');
SELECT is_empty($$SELECT * FROM sbq_receive('sd_set', 10)$$, 'SD24: sbq_settle abandon with a delay: nothing receivable at once');
SELECT ok((SELECT p.locked_until BETWEEN r.at0 + interval '2 seconds' AND r.at1 + interval '2 seconds' AND p.lock_token IS NULL
             FROM sbq_peek('sd_set', 10) p, res r WHERE r.name = 'k' AND p.message_id = 'k1'),
    'SD25: peek shows k1 locked until the time of the settle + 2 s');
SELECT is((SELECT state FROM sbq_peek('sd_d', 10) WHERE message_id = 'f1'), 'deferred',
    'SD26: a deferred message abandoned with a delay stays deferred');
SELECT is(pg_temp.delayed('sd_d', 'f1', 'f1', '1 second'), 'locked until now + delay',
    'SD27: peek shows the deferred f1 locked until the time of the abandon + 1 s');
SELECT is_empty($$SELECT * FROM sbq_receive('sd_s/$deadletterqueue', 10)$$,
    'SD28: on the dead-letter sub-queue the delayed dead letter is not receivable at once');
SELECT is(pg_temp.delayed('sd_s/$deadletterqueue', 's2', 's2', '2 seconds'), 'locked until now + delay',
    'SD29: peek of the dead-letter sub-queue shows s2 locked until the time of the abandon + 2 s');

SELECT matches(pg_temp.outcome($$SELECT sbq_abandon('sd_neg', pg_temp.t('n1'), delay => '1000000 years')$$),
    '^(00000|22023)$', 'SD29b: abandon with delay 1000000 years is accepted or refused with 22023 (never an overflow error)');

-- NULL and '0': available at once
SELECT lives_ok($$SELECT sbq_abandon('sd_z', pg_temp.t('z1'), NULL, NULL)$$, 'SD30: abandon with delay NULL');
SELECT lives_ok($$SELECT sbq_abandon('sd_z', pg_temp.t('z2'), delay => '0')$$, 'SD31: abandon with delay ''0''');
SELECT is(pg_temp.grab('sd_z', '#2'), ARRAY['z1#2:2', 'z2#2:2'],
    'SD32: with delay NULL and ''0'' both are received again at once (delivery_count 2)');

-- negative: 22023
SELECT * FROM pg_temp.bad('SD33', 'abandon with delay -1 second',
    $$SELECT sbq_abandon('sd_neg', pg_temp.t('n1'), delay => '-1 second')$$, '22023');
SELECT * FROM pg_temp.bad('SD34', 'abandon with delay ''-1 day 1 hour'' (negative as a whole)',
    $$SELECT sbq_abandon('sd_neg', pg_temp.t('n1'), delay => '-1 day 1 hour')$$, '22023');
SELECT * FROM pg_temp.bad('SD35', 'abandon(uuid[]) with delay -1 second',
    $$SELECT sbq_abandon('sd_neg', pg_temp.ts(ARRAY['n1', 'n2']), NULL, '-1 second')$$, '22023');
SELECT * FROM pg_temp.bad('SD36', 'abandon(q, untyped token literal) with delay -1 second',
    format('SELECT sbq_abandon(%L, %L, delay => %L)', 'sd_neg', pg_temp.t('n1'), '-1 second'), '22023');
SELECT * FROM pg_temp.bad('SD37', 'sbq_settle abandon with delay -1 second',
    $$SELECT * FROM sbq_settle('sd_neg', pg_temp.ts(ARRAY['n1', 'n2']), 'abandon', delay => '-1 second')$$, '22023');

-- the last allowed delivery dead-letters, the delay ignored
SELECT lives_ok($$SELECT sbq_abandon('sd_m1', pg_temp.t('m1'), delay => '1 hour')$$,
    'SD38: abandon with delay 1 hour on the only allowed delivery');
SELECT lives_ok(pg_temp.settle('m2', $$sbq_settle('sd_m1', ARRAY[pg_temp.t('m2')], 'abandon', delay => '1 hour')$$),
    'SD39: sbq_settle abandon with delay 1 hour on the only allowed delivery runs');
SELECT is((SELECT array_agg(outcome) FROM res WHERE name = 'm2'), ARRAY['dead_lettered'],
    'SD40: it reports dead_lettered');
SELECT is((SELECT array_agg(message_id || ':' || dead_letter_reason ORDER BY sequence_number)
             FROM sbq_peek('sd_m1/$deadletterqueue', 10)),
    ARRAY['m1:MaxDeliveryCountExceeded', 'm2:MaxDeliveryCountExceeded'],
    'SD41: both were dead-lettered with MaxDeliveryCountExceeded despite the delay');
SELECT is_empty($$SELECT * FROM sbq_peek('sd_m1', 10)$$, 'SD42: nothing of them is left (delayed) in sd_m1');

-- a queue that requires sessions: SB010 (its dead-letter sub-queue took one above)
SELECT * FROM pg_temp.bad('SD43', 'abandon with delay 1 second on a queue that requires sessions',
    $$SELECT sbq_abandon('sd_s', pg_temp.t('s1'), delay => '1 second')$$, 'SB010');
SELECT * FROM pg_temp.bad('SD44', 'abandon(uuid[]) with delay 1 second on a queue that requires sessions',
    $$SELECT sbq_abandon('sd_s', ARRAY[pg_temp.t('s1')], NULL, '1 second')$$, 'SB010');
SELECT * FROM pg_temp.bad('SD45', 'abandon(q, untyped token literal) with delay 1 second on a queue that requires sessions',
    format('SELECT sbq_abandon(%L, %L, delay => %L)', 'sd_s', pg_temp.t('s1'), '1 second'), 'SB010');
SELECT * FROM pg_temp.bad('SD46', 'sbq_settle abandon with delay 1 second on a queue that requires sessions',
    $$SELECT * FROM sbq_settle('sd_s', ARRAY[pg_temp.t('s1')], 'abandon', delay => '1 second')$$, 'SB010');
SELECT lives_ok($$SELECT sbq_abandon('sd_s', pg_temp.t('s1'), delay => '0')$$,
    'SD47: abandon with delay ''0'' on a queue that requires sessions is accepted');

-- ============================================================ waiting receives
SELECT is_empty($$SELECT * FROM sbq_receive('sd_q', 10, '0.5 seconds')$$,
    'SD48: a receive waiting 0.5 s does not get a1 before its delay (2 s) is over');
SELECT ok((SELECT clock_timestamp() < at0 + interval '2 seconds' FROM tm WHERE k = 'a1'),
    'SD49: (that wait ended before a1''s delay did)');
CREATE TEMP TABLE wr AS
    SELECT r.message_id, r.delivery_count, clock_timestamp() AS at FROM sbq_receive('sd_w', 1, '3 seconds') r;
SELECT is((SELECT array_agg(message_id || ':' || delivery_count) FROM wr), ARRAY['w1:2'],
    'SD50: a receive waiting up to 3 s gets w1 (delay 1 s) with delivery_count 2');
SELECT ok((SELECT wr.at >= tm.at0 + interval '1 second' FROM wr, tm WHERE tm.k = 'w1'),
    'SD51: not before the delay was over');

-- ============================================================ 2.2 s after the abandons
DO $$ BEGIN
    PERFORM pg_sleep(greatest(0, extract(epoch FROM (SELECT max(at1) FROM tm) + interval '2.2 seconds' - clock_timestamp())));
END $$;
SELECT is((SELECT ARRAY[active_count, locked_count] FROM sbq_queue_stats WHERE queue = 'sd_m2'), ARRAY[1, 0]::bigint[],
    'SD52: once its delay is over (not yet received) q1 counts as active, not locked');
SELECT is(pg_temp.grab('sd_q', '#3'), ARRAY['a1#3:2'],
    'SD53: after the delay a1 is received, with delivery_count 2 (one more than its delayed delivery)');
SELECT is(pg_temp.grab('sd_arr', '#2'), ARRAY['g1#2:2', 'g2#2:2'], 'SD54: after the delay g1 and g2 are received (delivery_count 2)');
-- a maintenance pass between the end of the delays and the receives below
SELECT lives_ok($$SELECT sbq_maintain()$$, 'SD55: a maintenance pass after the delays ran out');
SELECT is(pg_temp.grab('sd_m2', '#2'), ARRAY['q1#2:2'],
    'SD56: after the delay and the maintenance pass q1 is received with delivery_count 2 (the delay counted no delivery)');
SELECT is_empty($$SELECT * FROM sbq_peek('sd_m2/$deadletterqueue', 10)$$,
    'SD57: q1 (max_delivery_count 2) was not dead-lettered');
SELECT is(pg_temp.grab('sd_txt', '#2'), ARRAY['h1#2:2', 'h2#2:2', 'h3#2:2'],
    'SD58: after the delay h1, h2, h3 are received (delivery_count 2)');
SELECT is(pg_temp.grab('sd_set', '#2'), ARRAY['k1#2:2'], 'SD59: after the delay k1 is received (delivery_count 2)');
SELECT is(pg_temp.grab('sd_s/$deadletterqueue', '@dl2'), ARRAY['s2@dl2:' || (SELECT dc + 1 FROM tok WHERE k = 's2@dl')],
    'SD60: after the delay s2 is received from the dead-letter sub-queue (its delivery_count one more)');
SELECT is_empty($$SELECT * FROM sbq_receive('sd_d', 10)$$,
    'SD61: after the delay the deferred f1 is still not received by sbq_receive');
SELECT is((SELECT state || ':' || (locked_until IS NULL OR locked_until <= clock_timestamp()) FROM sbq_peek('sd_d', 10)
            WHERE message_id = 'f1'), 'deferred:true',
    'SD62: after the delay f1 is deferred and no longer locked');
SELECT is((SELECT array_agg(message_id || ':' || delivery_count)
             FROM sbq_receive_deferred('sd_d', ARRAY(SELECT seq FROM tok WHERE k = 'f1'))),
    ARRAY['f1:3'], 'SD63: receive_deferred gets f1 (delivery_count 3)');
SELECT is((SELECT ARRAY[active_count, locked_count] FROM sbq_queue_stats WHERE queue = 'sd_q'),
    ARRAY[0, 2]::bigint[], 'SD64: sd_q: a1 and a2 are locked by receives now');

SELECT * FROM finish();
ROLLBACK;
