-- sbqueue pgTAP: message sizes count the properties, as Service Bus counts them. A
-- message's properties (message_id, session_id, correlation_id, subject,
-- content_type, reply_to, reply_to_session_id, to_address and the application
-- properties) take at most 65,536 bytes, and body and properties together at most
-- the queue's max_message_size: SB007 otherwise, and nothing stored. A settlement
-- whose properties_to_modify would make the message outgrow either is refused the
-- same way and keeps its lock, so properties cannot grow a message without bound.
-- A batch takes at most 64 MiB. The code before counted the body alone: 20 MB of
-- application properties went into a 1 MiB queue, and each properties_to_modify
-- grew a message further.
BEGIN;
SELECT plan(46);

\ir bad_input_setup.psql

DO $$ BEGIN
    PERFORM sbq_create_queue('ms_small', max_message_size => 1000, max_delivery_count => 100);
    PERFORM sbq_create_queue('ms_big', max_message_size => 268435456, max_delivery_count => 100);
END $$;

-- sends
SELECT * FROM pg_temp.bad('MS1', 'a body of 900 bytes with 100 bytes of application properties in a 1,000-byte queue',
    $$SELECT sbq_send('ms_small', repeat('x', 900), message_id => 'm',
                      application_properties => jsonb_build_object('k', repeat('y', 100)))$$, 'SB007');
SELECT * FROM pg_temp.bad('MS2', 'a body of 100 bytes with a correlation id of 901 bytes in a 1,000-byte queue',
    $$SELECT sbq_send('ms_small', repeat('x', 100), correlation_id => repeat('c', 901))$$, 'SB007');
SELECT * FROM pg_temp.bad('MS3', '5 x 20 KB of system properties in a 256 MiB queue',
    $$SELECT sbq_send('ms_big', 'x', subject => repeat('s', 20000), correlation_id => repeat('c', 20000),
                      content_type => repeat('t', 20000), reply_to => repeat('r', 20000),
                      to_address => repeat('a', 20000))$$, 'SB007');
SELECT * FROM pg_temp.bad('MS4', '20 MB of application properties in a 256 MiB queue',
    $$SELECT sbq_send('ms_big', 'x', application_properties => jsonb_build_object('k', repeat('y', 20000000)))$$,
    'SB007');
SELECT * FROM pg_temp.bad('MS5', 'a batch of 3 x 30 MB (over 64 MiB) in a 256 MiB queue',
    $$SELECT sbq_send_batch('ms_big', array_fill(repeat('z', 30000000), ARRAY[3]))$$, 'SB007');

-- at the limits: accepted. What sbqueue gives a message itself (a message id, the
-- content type of a text body) does not count: a body of max_message_size bytes
-- sent without properties fits, as the contract has it.
SELECT lives_ok($$SELECT sbq_send('ms_small', repeat('x', 999), message_id => 'a')$$,
    'MS6: body and properties of exactly max_message_size (999 + 1) are accepted');
SELECT lives_ok($$SELECT sbq_send('ms_small', repeat('x', 1000))$$,
    'MS6b: a body of max_message_size without properties is accepted');
SELECT * FROM pg_temp.bad('MS7', 'one byte more (1,000 + 1)',
    $$SELECT sbq_send('ms_small', repeat('x', 1000), message_id => 'a')$$, 'SB007');
SELECT lives_ok($$SELECT sbq_send('ms_big', 'x', message_id => 'b', content_type => 'c',
                                  subject => repeat('s', 65534))$$,
    'MS8: properties of exactly 65,536 bytes are accepted');
SELECT lives_ok($$SELECT count(*) FROM sbq_send_batch('ms_big', array_fill(repeat('z', 30000000), ARRAY[2]))$$,
    'MS9: a batch of 2 x 30 MB (under 64 MiB) is accepted');
DO $$ BEGIN
    PERFORM sbq_purge_queue('ms_big');
END $$;

-- settlements that would grow a message past the limits: refused, the lock kept,
-- the properties as they were
DO $$ BEGIN
    PERFORM sbq_purge_queue('ms_small');
    PERFORM sbq_send('ms_small', repeat('x', 800), message_id => 'g',
                     application_properties => '{"n": 1}');
END $$;
CREATE TEMP TABLE lk AS SELECT lock_token AS t FROM sbq_receive('ms_small');
SELECT * FROM pg_temp.bad('MS10', 'an abandon adding 200 bytes of properties to a message of 800 bytes and 8 of properties',
    $$SELECT sbq_abandon('ms_small', (SELECT t FROM lk), jsonb_build_object('k', repeat('y', 200)))$$, 'SB007');
SELECT * FROM pg_temp.bad('MS11', 'the same as a defer',
    $$SELECT sbq_defer('ms_small', (SELECT t FROM lk), jsonb_build_object('k', repeat('y', 200)))$$, 'SB007');
SELECT * FROM pg_temp.bad('MS12', 'the same as a dead-lettering',
    $$SELECT sbq_deadletter('ms_small', (SELECT t FROM lk), 'r', 'd', jsonb_build_object('k', repeat('y', 200)))$$,
    'SB007');
SELECT lives_ok($$SELECT sbq_renew('ms_small', (SELECT t FROM lk))$$,
    'MS13: after the refused settlements the lock is still valid');
SELECT lives_ok($$SELECT sbq_abandon('ms_small', (SELECT t FROM lk), '{"n": 2, "m": "small"}')$$,
    'MS14: a properties_to_modify that keeps the message within its limit is merged');
SELECT is((SELECT application_properties FROM sbq_peek('ms_small')), '{"m": "small", "n": 2}'::jsonb,
    'MS15: ... and the properties are the merged ones');

-- growth by repeated settlements stops at 65,536 bytes of properties
CREATE FUNCTION pg_temp.grow(q text, n int) RETURNS int LANGUAGE plpgsql AS $$
DECLARE
    i int;
    tok uuid;
BEGIN
    FOR i IN 1 .. n LOOP
        SELECT lock_token INTO tok FROM sbq_receive(q);
        BEGIN
            PERFORM sbq_abandon(q, tok, jsonb_build_object('k' || i, repeat('y', 20000)));
        EXCEPTION WHEN SQLSTATE 'SB007' THEN
            PERFORM sbq_abandon(q, tok);
            RETURN i;
        END;
    END LOOP;
    RETURN 0;
END $$;
DO $$ BEGIN
    PERFORM sbq_send('ms_big', 'grows', message_id => 'grow');
END $$;
SELECT is(pg_temp.grow('ms_big', 10), 4,
    'MS16: adding 20 KB of properties on each abandon is refused at the 4th (over 64 KB)');
SELECT cmp_ok((SELECT octet_length(application_properties::text) FROM sbq_peek('ms_big')), '<', 65536,
    'MS17: ... and the message keeps the properties of the 3 that fit');

-- the dead-letter sub-queue: the same limits
DO $$
DECLARE
    tok uuid;
BEGIN
    PERFORM sbq_purge_queue('ms_small');
    PERFORM sbq_send('ms_small', repeat('x', 800), message_id => 'd');
    SELECT lock_token INTO tok FROM sbq_receive('ms_small');
    PERFORM sbq_deadletter('ms_small', tok);
END $$;
CREATE TEMP TABLE dl AS SELECT lock_token AS t FROM sbq_receive('ms_small/$deadletterqueue');
SELECT * FROM pg_temp.bad('MS18', 'an abandon in the dead-letter sub-queue adding 300 bytes to an 800-byte dead letter',
    $$SELECT sbq_abandon('ms_small/$deadletterqueue', (SELECT t FROM dl),
                         jsonb_build_object('k', repeat('y', 300)))$$, 'SB007');
SELECT lives_ok($$SELECT sbq_complete('ms_small/$deadletterqueue', (SELECT t FROM dl))$$,
    'MS19: ... and its lock is still valid');

-- a single message may be larger than a batch (64 MiB), up to max_message_size
SELECT lives_ok($$SELECT sbq_send('ms_big', repeat('x', 65 * 1024 * 1024)::bytea)$$,
    'MS20: a single send of 65 MiB into a 256 MiB queue is accepted (the 64 MiB cap is a batch''s)');
DO $$ BEGIN
    PERFORM sbq_purge_queue('ms_big');
END $$;

-- the content type the sender gave counts at settlement too
DO $$ BEGIN
    PERFORM sbq_create_queue('ms_ct', max_message_size => 70000, max_delivery_count => 100);
    PERFORM sbq_send('ms_ct', 'x'::bytea, content_type => repeat('c', 60000));
END $$;
CREATE TEMP TABLE ct AS SELECT lock_token AS t FROM sbq_receive('ms_ct');
SELECT * FROM pg_temp.bad('MS21', 'an abandon adding 60 KB of properties to a message with a 60 KB content type',
    $$SELECT sbq_abandon('ms_ct', (SELECT t FROM ct), jsonb_build_object('k', repeat('p', 60000)))$$, 'SB007');

-- application properties count as the JSON text a reader gets: a jsonb number of a
-- few bytes prints as 131,072 digits
SELECT * FROM pg_temp.bad('MS22', 'application properties of 3,900 numbers of 131,072 digits (a few KB as jsonb)',
    $$SELECT sbq_send('ms_big', 'x', application_properties =>
          ('{"k": [' || repeat('1e131071,', 3899) || '1e131071]}')::jsonb)$$,
    'SB007');
CREATE FUNCTION pg_temp.ms_elapsed(sql text) RETURNS float8 LANGUAGE plpgsql AS $$
DECLARE
    t0 timestamptz := clock_timestamp();
BEGIN
    BEGIN
        EXECUTE sql;
    EXCEPTION WHEN SQLSTATE 'SB007' THEN
        NULL;
    END;
    RETURN extract(epoch FROM clock_timestamp() - t0) * 1000;
END $$;
SELECT cmp_ok(pg_temp.ms_elapsed($$SELECT sbq_send('ms_small',
          ('[' || repeat('1e131071,', 19999) || '1e131071]')::jsonb)$$), '<', 2000::float8,
    'MS23: a JSON body of 20,000 such numbers (2.6 GB as text) is refused (SB007) at once, not printed');

-- a merge that does not make the message larger passes, also over a limit lowered since
DO $$ BEGIN
    PERFORM sbq_create_queue('ms_low', max_message_size => 1000, max_delivery_count => 100);
    PERFORM sbq_send('ms_low', repeat('x', 900), application_properties => '{"a": "bb"}');
    PERFORM sbq_update_queue('ms_low', max_message_size => 500);
END $$;
CREATE TEMP TABLE lo AS SELECT lock_token AS t FROM sbq_receive('ms_low');
SELECT lives_ok($$SELECT sbq_abandon('ms_low', (SELECT t FROM lo), '{"a": "c"}')$$,
    'MS24: properties_to_modify that do not grow a message over a lowered limit are merged');
CREATE TEMP TABLE lo2 AS SELECT lock_token AS t FROM sbq_receive('ms_low');
SELECT lives_ok($$SELECT sbq_deadletter('ms_low', (SELECT t FROM lo2), 'r', 'd', '{}')$$,
    'MS25: ... and an empty one lets it be dead-lettered');
SELECT is((SELECT application_properties FROM sbq_peek('ms_low/$deadletterqueue')), '{"a": "c"}'::jsonb,
    'MS26: ... with the properties merged before');

-- containers count their separators too: 32,000 empty arrays print as 128,000 bytes
SELECT * FROM pg_temp.bad('MS27', 'application properties of 32,000 empty arrays (128,000 bytes as text)',
    $$SELECT sbq_send('ms_big', 'x', application_properties =>
          ('{"a": [' || repeat('[], ', 31999) || '[]]}')::jsonb)$$, 'SB007');

-- a message whose properties already exceed the limits (stored by a library that did
-- not count them) grows no further; an empty properties_to_modify still settles it
DO $$ BEGIN
    PERFORM sbq_create_queue('ms_legacy', max_message_size => 262144, max_delivery_count => 100);
    PERFORM sbq_send('ms_legacy', 'x');
END $$;
UPDATE sbq.messages SET application_properties = jsonb_build_object('old', repeat('o', 300000))
 WHERE queue_id = (SELECT queue_id FROM sbq.queues WHERE name = 'ms_legacy');
CREATE TEMP TABLE lg AS SELECT lock_token AS t FROM sbq_receive('ms_legacy');
SELECT * FROM pg_temp.bad('MS28', 'adding 1 MB of properties to a message that already has 300 KB',
    $$SELECT sbq_abandon('ms_legacy', (SELECT t FROM lg), jsonb_build_object('new', repeat('n', 1000000)))$$,
    'SB007');
SELECT lives_ok($$SELECT sbq_abandon('ms_legacy', (SELECT t FROM lg), '{}')$$,
    'MS29: ... while an empty properties_to_modify settles it');

-- a merge equal in value but not in text (0 and 0.000...0) is no way around the limits
DO $$ BEGIN
    PERFORM sbq_create_queue('ms_eq', max_message_size => 4096, max_delivery_count => 100);
    PERFORM sbq_send('ms_eq', 'x', application_properties =>
        (SELECT jsonb_object_agg('p' || i, 0) FROM generate_series(1, 200) i));
END $$;
CREATE TEMP TABLE eq AS SELECT lock_token AS t FROM sbq_receive('ms_eq');
SELECT * FROM pg_temp.bad('MS30', 'an abandon setting 200 zeros to zeros of 16,383 decimals (3 MB as text)',
    $$SELECT sbq_abandon('ms_eq', (SELECT t FROM eq),
          (SELECT jsonb_object_agg('p' || i, ('0.' || repeat('0', 16383))::numeric)
             FROM generate_series(1, 200) i))$$, 'SB007');

SELECT * FROM finish();
ROLLBACK;
