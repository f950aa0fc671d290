-- sbqueue pgTAP: sending, sequence order, max_messages, max_wait (sleeps: about 1 s of max_wait)
BEGIN;
SELECT plan(30);

DO $$ BEGIN
    PERFORM sbq_create_queue('t08');
    PERFORM sbq_create_queue('t08_order');
    PERFORM sbq_create_queue('t08_small', max_message_size => 1024);
    PERFORM sbq_create_queue('t08_wait');
END $$;

-- ------------------------------------------------------------ the three body types
DO $$ BEGIN
    PERFORM sbq_send('t08', 'text body'::text, message_id => 'txt', correlation_id => 'c1',
                     subject => 'subj', application_properties => '{"k": "v", "n": 1}');
    PERFORM sbq_send('t08', '\x00ff10'::bytea, message_id => 'bin');
    PERFORM sbq_send('t08', '{"a": 1}'::jsonb, message_id => 'json');
    PERFORM sbq_send('t08', 'no id'::text);
END $$;
CREATE TEMP TABLE p AS SELECT * FROM sbq_peek('t08', 10);
SELECT is((SELECT body FROM p WHERE message_id = 'txt'), convert_to('text body', 'UTF8'),
    '§5 (API Sending): a text body is stored as its UTF-8 bytes');
SELECT is((SELECT content_type FROM p WHERE message_id = 'txt'), 'text/plain; charset=utf-8',
    '§5 (API Sending): a text body defaults content_type to text/plain; charset=utf-8');
SELECT is((SELECT body FROM p WHERE message_id = 'bin'), '\x00ff10'::bytea,
    '§5 (API Sending): a bytea body is stored as is');
SELECT ok((SELECT content_type IS NULL FROM p WHERE message_id = 'bin'),
    '§5 (API Sending): a bytea body has a NULL content_type by default');
SELECT is((SELECT convert_from(body, 'UTF8')::jsonb FROM p WHERE message_id = 'json'), '{"a": 1}'::jsonb,
    '§5 (API Sending): a jsonb body is stored as its UTF-8 text');
SELECT is((SELECT content_type FROM p WHERE message_id = 'json'), 'application/json',
    '§5 (API Sending): a jsonb body defaults content_type to application/json');
SELECT ok((SELECT message_id ~ '^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$'
             FROM p WHERE body = convert_to('no id', 'UTF8')),
    '§5 (API Sending): a NULL message_id becomes a new UUID as text');
SELECT is((SELECT correlation_id || '/' || subject || '/' || application_properties::text FROM p WHERE message_id = 'txt'),
          'c1/subj/' || '{"k": "v", "n": 1}'::jsonb::text,
    '§5: correlation_id, subject and application_properties are stored');
SELECT throws_ok($$SELECT sbq_send('t08', 'x'::text, application_properties => '[1, 2]')$$, '22023', NULL,
    '§5 (API Sending): application_properties that is not a JSON object fails with 22023');
SELECT throws_ok(format('SELECT sbq_send(%L, %L::text, message_id => %L)', 't08', 'x', repeat('m', 129)), '22023', NULL,
    'R5.3: a 129-character message_id fails with 22023');
SELECT throws_ok($$SELECT sbq_send('t08', NULL::text)$$, '22004', NULL,
    '(API Errors): a NULL body fails with 22004');
SELECT throws_ok($$SELECT sbq_send('t08_nosuch', 'x'::text)$$, 'SB001', NULL,
    '(API Errors): a send to an unknown queue fails with SB001');

-- ------------------------------------------------------------ max_message_size
SELECT throws_ok(format('SELECT sbq_send(%L, %L::text)', 't08_small', repeat('x', 1025)), 'SB007', NULL,
    'R5.1: a body longer than max_message_size (1025 > 1024) fails with SB007');
SELECT is_empty($$SELECT * FROM sbq_peek('t08_small', 10)$$,
    'R5.1: nothing was stored for the too-large message');
SELECT lives_ok(format('SELECT sbq_send(%L, %L::text)', 't08_small', repeat('x', 1024)),
    'R5.1: a body of exactly max_message_size (1024) is accepted');

-- ------------------------------------------------------------ sequence order, max_messages
CREATE TEMP TABLE s AS
    SELECT seq, ord FROM sbq_send_batch('t08_order', ARRAY['o1', 'o2', 'o3', 'o4', 'o5']::text[])
                         WITH ORDINALITY AS b(seq, ord);
CREATE TEMP TABLE s6 AS SELECT sbq_send('t08_order', 'o6'::text) AS seq;
SELECT ok((SELECT bool_and(seq > prev) FROM (SELECT seq, lag(seq) OVER (ORDER BY ord) AS prev FROM s) x WHERE prev IS NOT NULL),
    'R1.12, §5: send_batch returns strictly increasing sequence numbers in body order');
SELECT cmp_ok((SELECT seq FROM s6), '>', (SELECT max(seq) FROM s),
    'R1.12, §5: a later send gets a higher sequence number');
SELECT is((SELECT array_agg(convert_from(body, 'UTF8') ORDER BY sequence_number) FROM sbq_peek('t08_order', 10)),
          ARRAY['o1', 'o2', 'o3', 'o4', 'o5', 'o6'],
    'R1.12: the bodies are stored in batch order');

CREATE TEMP TABLE r3 AS SELECT r.*, r.ordinality AS ord FROM sbq_receive('t08_order', 3) WITH ORDINALITY AS r;
SELECT is((SELECT array_agg(sequence_number ORDER BY ord) FROM r3), (SELECT array_agg(seq ORDER BY ord) FROM s WHERE ord <= 3),
    'R1.6, R1.12: receive(3) returns the 3 lowest sequence numbers, lowest first');
CREATE TEMP TABLE r10 AS SELECT r.*, r.ordinality AS ord FROM sbq_receive('t08_order', 10) WITH ORDINALITY AS r;
SELECT is((SELECT array_agg(convert_from(body, 'UTF8') ORDER BY ord) FROM r10), ARRAY['o4', 'o5', 'o6'],
    'R1.9, R1.12: receive(10) with 3 available returns those 3, in sequence order');
SELECT is_empty($$SELECT * FROM sbq_receive('t08_order', 10)$$,
    'R1.6: receive on a queue with nothing available returns an empty set, not an error');

SELECT throws_ok($$SELECT * FROM sbq_receive('t08_order', 0)$$, '22023', NULL,
    'R1.5: receive max_messages 0 fails with 22023');
SELECT throws_ok($$SELECT * FROM sbq_receive('t08_order', 5001)$$, '22023', NULL,
    'R1.5 (API: 1 .. 5000): receive max_messages 5001 fails with 22023');
SELECT throws_ok($$SELECT * FROM sbq_receive('t08_order', NULL)$$, '22004', NULL,
    'R1.5 (API Errors): receive max_messages NULL fails with 22004');
SELECT throws_ok($$SELECT * FROM sbq_receive('t08_order', 1, '-1 second')$$, '22023', NULL,
    'R1.5: a negative max_wait fails with 22023');
SELECT throws_ok($$SELECT * FROM sbq_receive('t08_nosuch')$$, 'SB001', NULL,
    '(API Errors): receive on an unknown queue fails with SB001');

-- ------------------------------------------------------------ max_wait
DO $$ BEGIN PERFORM sbq_send_batch('t08_wait', ARRAY['w1', 'w2']::text[]); END $$;
CREATE TEMP TABLE w0 AS SELECT clock_timestamp() AS t0;
CREATE TEMP TABLE w1 AS
    SELECT count(*) AS n, clock_timestamp() AS t1 FROM sbq_receive('t08_wait', 10, '3 seconds');
SELECT is((SELECT n FROM w1), 2::bigint,
    'R1.8, R1.9: receive(10, max_wait 3 s) with 2 available returns those 2');
SELECT cmp_ok((SELECT t1 - (SELECT t0 FROM w0) FROM w1), '<', interval '1 second',
    'R1.8: receive with max_wait returns at once when messages are available');

CREATE TEMP TABLE w2 AS SELECT clock_timestamp() AS t0;
CREATE TEMP TABLE w3 AS
    SELECT count(*) AS n, clock_timestamp() AS t1 FROM sbq_receive('t08_wait', 5, '1 second');
SELECT is((SELECT n FROM w3), 0::bigint,
    'R1.6, R1.7: receive(5, max_wait 1 s) with nothing available returns an empty set');
SELECT ok((SELECT t1 - (SELECT t0 FROM w2) BETWEEN interval '0.9 seconds' AND interval '2.5 seconds' FROM w3),
    'R1.7: ... after waiting about max_wait (0.9 s to 2.5 s)');

SELECT * FROM finish();
ROLLBACK;
