-- sbqueue pgTAP: arrays are bounded before any work, and errors do not show
-- sbqueue's internal SQL. Arrays: Every array argument has at
-- most 5,000 elements, counted before the call looks at one of them; repeats are
-- removed in O(n log n). A role with no queue at all cannot make a call burn a
-- core: 60,000 elements are refused at once (the code before took 1.4 s to drop
-- the repeats of such an array, uncancellably, before any check). Each refused
-- case is two assertions: the SQLSTATE, and nothing changed (bad_input_setup.psql).
BEGIN;
SELECT plan(38);

\ir bad_input_setup.psql

DO $$ BEGIN
    PERFORM sbq_create_queue('bb_q');
END $$;
CREATE TEMP TABLE seq (k text PRIMARY KEY, v bigint);
INSERT INTO seq SELECT 'm' || i, sbq_send('bb_q', 'm' || i) FROM generate_series(1, 3) i;

-- 60,000 elements: refused before any work, quickly, on a queue that exists and one
-- that does not
CREATE TEMP TABLE big AS SELECT array_agg(i::bigint) AS seqs,
    array_agg(gen_random_uuid()) AS tokens, array_agg('b' || i) AS bodies
  FROM generate_series(1, 60000) i;
SELECT * FROM pg_temp.bad('BB1', 'receive_deferred of 60,000 sequence numbers',
    $$SELECT * FROM sbq_receive_deferred('bb_q', (SELECT seqs FROM big))$$, '22023');
SELECT * FROM pg_temp.bad('BB2', 'resubmit of 60,000 sequence numbers',
    $$SELECT sbq_resubmit('bb_q', (SELECT seqs FROM big))$$, '22023');
SELECT * FROM pg_temp.bad('BB3', 'complete of 60,000 lock tokens',
    $$SELECT sbq_complete('bb_q', (SELECT tokens FROM big))$$, '22023');
SELECT * FROM pg_temp.bad('BB4', 'send_batch of 60,000 bodies',
    $$SELECT sbq_send_batch('bb_q', (SELECT bodies FROM big))$$, '22023');
SELECT * FROM pg_temp.bad('BB5', 'send_batch of 5,001 bodies',
    $$SELECT sbq_send_batch('bb_q', (SELECT bodies[1:5001] FROM big))$$, '22023');

CREATE FUNCTION pg_temp.ms(sql text) RETURNS float8 LANGUAGE plpgsql AS $$
DECLARE
    t0 timestamptz := clock_timestamp();
BEGIN
    BEGIN
        EXECUTE sql;
    EXCEPTION WHEN OTHERS THEN
        NULL;
    END;
    RETURN extract(epoch FROM clock_timestamp() - t0) * 1000;
END $$;
SELECT cmp_ok(pg_temp.ms($$SELECT * FROM sbq_receive_deferred('no_such_queue',
        (SELECT seqs FROM big))$$), '<', 300::float8,
    'BB6: 60,000 sequence numbers for a queue that does not exist are refused in well under a second');
SELECT cmp_ok(pg_temp.ms($$SELECT sbq_resubmit('no_such_queue', (SELECT seqs FROM big))$$),
    '<', 300::float8, 'BB7: the same for resubmit');

-- 5,000 elements are taken; repeats are dropped, the first of each kept
SELECT is((SELECT count(*) FROM sbq_receive_deferred('bb_q', array_fill(0::bigint, ARRAY[0]))),
    0::bigint, 'BB8: an empty array receives nothing');
SELECT throws_ok($$SELECT * FROM sbq_receive_deferred('bb_q', (SELECT seqs[1:5000] FROM big))$$,
    'SB003', NULL, 'BB9: 5,000 sequence numbers are looked at (none is deferred: SB003)');
SELECT is((SELECT count(*) FROM sbq_send_batch('bb_q', (SELECT bodies[1:5000] FROM big))),
    5000::bigint, 'BB10: a batch of 5,000 bodies is sent');
DO $$ BEGIN
    PERFORM sbq_defer('bb_q', lock_token) FROM sbq_receive('bb_q', 2);
END $$;
SELECT is((SELECT array_agg(sequence_number ORDER BY sequence_number) FROM sbq_receive_deferred('bb_q',
        (SELECT array_fill(v, ARRAY[2500]) || array_fill((SELECT v FROM seq WHERE k = 'm2'), ARRAY[2500])
           FROM seq WHERE k = 'm1'))),
    (SELECT array_agg(v ORDER BY v) FROM seq WHERE k IN ('m1', 'm2')),
    'BB11: 5,000 elements repeating two deferred messages receive those two once each');

-- an error inside one of sbqueue's statements names the statement, never its SQL
-- (which would show the caller sbqueue's tables and how it uses them). A constraint
-- added for this test (rolled back with it) makes the send's own statement fail: a
-- missing right no longer can, as the statements run as the owner of the tables.
CREATE FUNCTION pg_temp.err(sql text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    ctx text;
BEGIN
    EXECUTE sql;
    RETURN 'no error';
EXCEPTION WHEN OTHERS THEN
    GET STACKED DIAGNOSTICS ctx = PG_EXCEPTION_CONTEXT;
    RETURN SQLSTATE || E'\n' || ctx;
END $$;
ALTER TABLE sbq.messages ADD CONSTRAINT bb_no_x CHECK (body <> '\x78'::bytea);
CREATE TEMP TABLE e AS SELECT pg_temp.err($$SELECT sbq_send('bb_q', 'x')$$) AS e;
ALTER TABLE sbq.messages DROP CONSTRAINT bb_no_x;
SELECT is((SELECT split_part(e, E'\n', 1) FROM e), '23514',
    'BB12: a send that a constraint on the message table refuses gets 23514');
SELECT ok((SELECT e !~ 'sbq\.' AND e !~ 'name_key' FROM e),
    'BB13: its context shows no SQL of sbqueue''s');
SELECT ok((SELECT e ~ 'sbqueue statement "' FROM e),
    'BB14: its context names the sbqueue statement');
SELECT ok((SELECT e ~ 'sbqueue statement "[^"]+"\nSQL statement "SELECT sbq_send\(''bb_q'', ''x''\)"' FROM e),
    'BB16: the caller''s own context lines stay, after the sbqueue statement''s');

-- a max_wait past the end of time waits (until cancelled), instead of not at all
DO $$ BEGIN
    PERFORM sbq_create_queue('bb_empty');
END $$;
CREATE FUNCTION pg_temp.waits(sql text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE sql;
    RETURN 'returned';
EXCEPTION WHEN query_canceled THEN
    RETURN 'cancelled';
END $$;
SET LOCAL statement_timeout = '300ms';
SELECT pg_temp.waits($$SELECT * FROM sbq_receive('bb_empty', 1, '106751000 days')$$) AS w \gset
RESET statement_timeout;
SELECT is(:'w'::text, 'cancelled', 'BB15: a receive with max_wait 106751000 days waits until it is cancelled');

SET LOCAL statement_timeout = '300ms';
SELECT pg_temp.waits($$SELECT * FROM sbq_receive('bb_empty', 1, '300000 years')$$) AS w2 \gset
RESET statement_timeout;
SELECT is(:'w2'::text, 'cancelled',
    'BB17: a max_wait longer than a timestamp can hold waits until cancelled, not refused');

-- arrays of more than one dimension are refused, not flattened
SELECT * FROM pg_temp.bad('BB18', 'send_batch of a 2 x 2 array',
    $$SELECT sbq_send_batch('bb_q', ARRAY[['a', 'b'], ['c', 'd']])$$, '22023');
SELECT * FROM pg_temp.bad('BB19', 'receive_deferred of a 2 x 1 array',
    $$SELECT * FROM sbq_receive_deferred('bb_q', ARRAY[[1], [2]]::bigint[])$$, '22023');

-- a null element is named by the subscript the caller wrote, whatever the lower bound
CREATE FUNCTION pg_temp.detail(sql text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    d text;
BEGIN
    EXECUTE sql;
    RETURN 'no error';
EXCEPTION WHEN OTHERS THEN
    GET STACKED DIAGNOSTICS d = PG_EXCEPTION_DETAIL;
    RETURN SQLSTATE || ': ' || d;
END $$;
SELECT is(pg_temp.detail($$SELECT * FROM sbq_receive_deferred('bb_q', '[0:2]={1,2,NULL}'::bigint[])$$),
    '22004: Element 2 is null.',
    'BB20: the null element of an array starting at 0 is named by its subscript, 2');
SELECT is(pg_temp.detail($$SELECT sbq_send_batch('bb_q', '[5:6]={a,NULL}'::text[])$$),
    '22004: Element 6 is null.',
    'BB21: the same for the bodies of a batch starting at 5');

-- Durations are exact: checked as a day of 24 hours and a month of 30 days, and
-- stored and applied as that many microseconds, so the value checked is the value
-- applied. A calendar month applied after a 30-day check let '1000 mon -30000 days
-- 10 seconds' (10 s as checked) lock a message for 436 days.
DO $$ BEGIN
    PERFORM sbq_create_queue('bb_iv', lock_duration => '1000 mon -30000 days 10 seconds',
                             duplicate_detection_window => '12 mon -359 days',
                             dead_letter_ttl => '1 mon');
END $$;
SELECT is((SELECT lock_duration FROM sbq_get_queue('bb_iv'))::text, '00:00:10',
    'BB22: a lock duration of months and days of both signs is stored as the 10 s it was checked as');
SELECT is((SELECT duplicate_detection_window::text || ' / ' || dead_letter_ttl::text
             FROM sbq_get_queue('bb_iv')), '24:00:00 / 720:00:00',
    'BB23: the duplicate window and dead-letter retention are stored as exact lengths too');
DO $$ BEGIN
    PERFORM sbq_send('bb_iv', 'x', time_to_live => '12 mon -359 days');
END $$;
SELECT is((SELECT locked_until - clock_timestamp() < interval '11 seconds'
             FROM sbq_receive('bb_iv')), true,
    'BB24: the lock lasts the 10 s checked, not 436 days');
SELECT is((SELECT expires_at - enqueued_time FROM sbq_peek('bb_iv')), interval '24 hours',
    'BB25: a time to live of 12 months less 359 days lasts the 1 day it was checked as');
SELECT * FROM pg_temp.bad('BB26', 'a lock duration of 1 month less 29 days 23:54:59 (5 min 1 s)',
    $$SELECT sbq_update_queue('bb_iv', lock_duration => '1 mon -29 days -23 hours -54 minutes -59 seconds')$$, '22023');

-- a long call over a large array is cancelled at once: statement_timeout (a cancel
-- like pg_cancel_backend's) ends a batch of 5,000 bodies within 100 ms of firing, with
-- 57014, and stores nothing. (The bodies are of 1,000 bytes: PostgreSQL itself does
-- not look for a cancel while it builds an array argument, which for 5,000 bodies of
-- 12 KB takes longer than the whole call here. The timeout fires after 10 ms, well
-- inside the call: on a fast machine a send stores 5,000 such bodies in about 30 ms.)
DO $$ BEGIN
    PERFORM sbq_create_queue('bb_big', max_message_size => 268435456);
END $$;
CREATE FUNCTION pg_temp.cancelled_after(sql text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE sql;
    RETURN 'not cancelled';
EXCEPTION WHEN query_canceled THEN
    -- from the start of the statement, which the timeout counts from
    RETURN '57014 ' || (extract(epoch FROM clock_timestamp() - statement_timestamp()) * 1000)::int;
END $$;
SET LOCAL statement_timeout = '10ms';
SELECT pg_temp.cancelled_after(
    $$SELECT count(*) FROM sbq_send_batch('bb_big', array_fill(repeat('x', 1000), ARRAY[5000]))$$)
    AS c \gset
RESET statement_timeout;
SELECT ok(:'c' ~ '^57014 ' AND split_part(:'c', ' ', 2)::int < 110,
    'BB27: a batch of 5,000 bodies is cancelled by a 10 ms statement_timeout within 100 ms of it (' || :'c' || ' ms)');
SELECT is((SELECT count(*) FROM sbq_peek('bb_big', 10)), 0::bigint,
    'BB28: ... and stores nothing');

-- durations stored before they were made exact (by 0.4 and earlier) are applied as
-- the exact lengths they were checked as too: on a lock, and on the time to live of
-- a resubmitted dead letter (which SQL adds)
DO $$ BEGIN
    PERFORM sbq_create_queue('bb_old');
    PERFORM sbq_send('bb_old', 'dead');
    PERFORM sbq_deadletter('bb_old', lock_token) FROM sbq_receive('bb_old');
    PERFORM sbq_send('bb_old', 'locked');
END $$;
UPDATE sbq.queues SET lock_duration = '1000 mon -30000 days 10 seconds' WHERE name = 'bb_old';
UPDATE sbq.dead_letters SET time_to_live = '12 mon -359 days'
 WHERE queue_id = (SELECT queue_id FROM sbq.queues WHERE name = 'bb_old');
-- (a change of any queue drops the backend's queue cache, as a new session starts
-- without one)
DO $$ BEGIN
    PERFORM sbq_update_queue('bb_q', max_delivery_count => 10);
END $$;
SELECT is((SELECT locked_until - clock_timestamp() < interval '11 seconds' FROM sbq_receive('bb_old')), true,
    'BB29: a lock duration stored as 1000 months less 30000 days and 10 s locks for 10 s');
DO $$ BEGIN
    PERFORM sbq_resubmit('bb_old');
END $$;
SELECT is((SELECT expires_at - enqueued_time FROM sbq_peek('bb_old', 10) WHERE body = 'dead'),
    interval '24 hours',
    'BB30: a dead letter whose stored time to live is 12 months less 359 days lives 1 day once resubmitted');

SELECT * FROM finish();
ROLLBACK;
