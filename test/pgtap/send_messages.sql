-- sbqueue pgTAP: sending batches (0.9, spec items 1 and 2).
-- Item 1: sbq_send_batch(queue, text[]|bytea[]|jsonb[], message_id => X) with more than
-- one body is 22023 and stores nothing, with or without duplicate detection; one body or
-- none with a message_id is accepted.
-- Item 2: the composite type sbq_new_message, its constructor sbq_new_message(body
-- text|bytea|jsonb, ... the optional arguments of sbq_send in the same order) with
-- sbq_send's content_type defaults, and sbq_send_batch(queue, sbq_new_message[]): one
-- sequence number per element in order, each message with its own properties (every
-- property checked with sbq_peek), scheduled elements, duplicate detection per message
-- in order, session_id required on a session queue, the checks of sbq_send per element
-- (22023, SB007), NULL element or body 22004, all or nothing, SB010 to a dead-letter
-- sub-queue, at most 5000 elements.
-- Failing calls: pg_temp.bad() (bad_input_setup.psql), the SQLSTATE and nothing changed
-- (every table of schema sbq, duplicate-detection history included). No sleeps.
BEGIN;
SELECT plan(84);

\ir bad_input_setup.psql

\ir settle_setup.psql

-- The sequence numbers returned by the batches, by a name, with their place (n).
CREATE TEMP TABLE bs (name text, n bigint, seq bigint);
-- The statement that runs the sbq_send_batch(...) call _call and keeps what it returns
-- under _name (for lives_ok: a failing call is a failed test, not an aborted file).
CREATE FUNCTION pg_temp.batch(_name text, _call text) RETURNS text LANGUAGE sql AS $$
    SELECT format('INSERT INTO bs SELECT %L, x.n, x.seq FROM %s WITH ORDINALITY AS x(seq, n)', _name, _call)
$$;
CREATE FUNCTION pg_temp.seqs(_name text) RETURNS bigint[] LANGUAGE sql AS $$
    SELECT array_agg(seq ORDER BY n) FROM bs WHERE name = _name
$$;

-- What peek shows of a message: every property sbq_new_message carries, and its state.
CREATE FUNCTION pg_temp.props(_q text, _seq bigint) RETURNS text[] LANGUAGE sql AS $$
    SELECT ARRAY[p.message_id, encode(p.body, 'hex'), p.content_type, p.session_id, p.correlation_id, p.subject,
                 p.reply_to, p.reply_to_session_id, p.to_address, p.time_to_live::text,
                 (p.expires_at = p.enqueued_time + p.time_to_live)::text, p.application_properties::text, p.state]
      FROM sbq_peek(_q, 5000) p WHERE p.sequence_number = _seq
$$;

-- ------------------------------------------------------------ fixtures
DO $$ BEGIN
    PERFORM sbq_create_queue('sn_q');
    PERFORM sbq_create_queue('sn_dup', duplicate_detection_window => '1 minute');
    PERFORM sbq_create_queue('sn_b');
    PERFORM sbq_create_queue('sn_dd', duplicate_detection_window => '1 minute');
    PERFORM sbq_create_queue('sn_nodup');
    PERFORM sbq_create_queue('sn_s', requires_session => true);
    PERFORM sbq_create_queue('sn_small', max_message_size => 10);
    PERFORM sbq_create_queue('sn_big');
END $$;
CREATE TEMP TABLE pre AS SELECT sbq_send('sn_dd', 'pre'::text, message_id => 'P') AS seq;
CREATE TEMP TABLE sch AS SELECT date_trunc('second', clock_timestamp()) + interval '1 day' AS t;

-- ============================================================ item 1: a batch cannot share one message_id
SELECT * FROM pg_temp.bad('SN01', 'send_batch text[] of two bodies with message_id',
    $$SELECT sbq_send_batch('sn_q', ARRAY['a', 'b']::text[], message_id => 'same')$$, '22023');
SELECT * FROM pg_temp.bad('SN02', 'send_batch bytea[] of two bodies with message_id',
    $$SELECT sbq_send_batch('sn_q', ARRAY['\x01', '\x02']::bytea[], message_id => 'same')$$, '22023');
SELECT * FROM pg_temp.bad('SN03', 'send_batch jsonb[] of three bodies with message_id',
    $$SELECT sbq_send_batch('sn_q', ARRAY['1', '2', '3']::jsonb[], message_id => 'same')$$, '22023');
SELECT * FROM pg_temp.bad('SN04', 'send_batch text[] of two bodies with message_id, on a queue with duplicate detection',
    $$SELECT sbq_send_batch('sn_dup', ARRAY['a', 'b']::text[], message_id => 'same')$$, '22023');
SELECT * FROM pg_temp.bad('SN05', 'send_batch bytea[] of two bodies with message_id, on a queue with duplicate detection',
    $$SELECT sbq_send_batch('sn_dup', ARRAY['\x01', '\x02']::bytea[], message_id => 'same')$$, '22023');
SELECT * FROM pg_temp.bad('SN06', 'send_batch jsonb[] of two bodies with message_id, on a queue with duplicate detection',
    $$SELECT sbq_send_batch('sn_dup', ARRAY['{}', '[]']::jsonb[], message_id => 'same')$$, '22023');
SELECT is(pg_temp.val($$SELECT count(*) FROM sbq_send_batch('sn_q', ARRAY['solo']::text[], message_id => 'solo-t')$$), '1',
    'SN07: send_batch text[] of one body with message_id is accepted');
SELECT is(pg_temp.val($$SELECT count(*) FROM sbq_send_batch('sn_dup', ARRAY['\x05']::bytea[], message_id => 'solo-b')$$), '1',
    'SN08: send_batch bytea[] of one body with message_id is accepted on a queue with duplicate detection');
SELECT is(pg_temp.val($$SELECT count(*) FROM sbq_send_batch('sn_q', ARRAY[]::jsonb[], message_id => 'none')$$), '0',
    'SN09: send_batch jsonb[] of no body with message_id is accepted and returns nothing');
SELECT is(pg_temp.val($$SELECT count(*) FROM sbq_send_batch('sn_dup', ARRAY['a', 'b']::text[], message_id => NULL)$$), '2',
    'SN10: send_batch text[] of two bodies with message_id NULL is accepted');
SELECT is((SELECT array_agg(message_id ORDER BY sequence_number) FROM sbq_peek('sn_q', 10)), ARRAY['solo-t'],
    'SN11: sn_q holds only the one-body batch, with its message_id');
SELECT is((SELECT count(DISTINCT message_id) FILTER (WHERE message_id IS NOT NULL AND message_id <> 'solo-b')
             FROM sbq_peek('sn_dup', 10)), 2::bigint,
    'SN12: sn_dup holds the one-body batch and the two bodies with message ids of their own');

-- ============================================================ item 2: the type and its constructor
SELECT is((SELECT array_agg(a.attname || ' ' || format_type(a.atttypid, a.atttypmod) ORDER BY a.attnum)
             FROM pg_attribute a WHERE a.attrelid = to_regclass('sbq_new_message') AND a.attnum > 0 AND NOT a.attisdropped),
    ARRAY['body bytea', 'message_id text', 'session_id text', 'correlation_id text', 'subject text', 'content_type text',
          'reply_to text', 'reply_to_session_id text', 'to_address text', 'time_to_live interval',
          'scheduled_enqueue_time timestamp with time zone', 'application_properties jsonb'],
    'SN13: the composite type sbq_new_message has the fields of the spec, in order');
SELECT is(pg_temp.val($$SELECT ARRAY[encode(m.body, 'hex'), m.content_type, m.message_id, m.session_id, m.correlation_id,
                                     m.subject, m.reply_to, m.reply_to_session_id, m.to_address, m.time_to_live::text,
                                     m.scheduled_enqueue_time::text, m.application_properties::text]::text
                            FROM sbq_new_message('hé') m$$),
    ARRAY['68c3a9', 'text/plain; charset=utf-8', NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL]::text,
    'SN14: sbq_new_message(untyped literal) is the text form: body its UTF-8 bytes, content_type text/plain; charset=utf-8, the rest NULL');
SELECT is(pg_temp.val($$SELECT ARRAY[encode(m.body, 'escape'), m.content_type]::text
                            FROM sbq_new_message('{"a": [1, 2], "b": "é"}'::jsonb) m$$),
    ARRAY['{"a": [1, 2], "b": "\303\251"}', 'application/json']::text,
    'SN15: sbq_new_message(jsonb): body its UTF-8 text, content_type application/json');
SELECT is(pg_temp.val($$SELECT ARRAY[encode(m.body, 'hex'), coalesce(m.content_type, 'NULL')]::text
                            FROM sbq_new_message('\x00ff'::bytea) m$$),
    ARRAY['00ff', 'NULL']::text,
    'SN16: sbq_new_message(bytea): body as given, content_type NULL');
SELECT is(pg_temp.val($$SELECT ARRAY[m.message_id, m.session_id, m.correlation_id, m.subject, m.content_type, m.reply_to,
                                     m.reply_to_session_id, m.to_address, m.time_to_live::text,
                                     (m.scheduled_enqueue_time = '2030-01-02 03:04:05+00')::text,
                                     m.application_properties::text]::text
                            FROM sbq_new_message('x'::text, 'mid', 'sid', 'cid', 'subj', 'ct', 'rt', 'rts', 'to',
                                                 '1 hour', '2030-01-02 03:04:05+00', '{"k": 1}') m$$),
    ARRAY['mid', 'sid', 'cid', 'subj', 'ct', 'rt', 'rts', 'to', '01:00:00', 'true', '{"k": 1}']::text,
    'SN17: sbq_new_message takes sbq_send''s optional arguments in sbq_send''s order (positional)');
SELECT is(pg_temp.val($$SELECT ARRAY[m.subject, m.content_type, coalesce(m.message_id, 'NULL')]::text
                            FROM sbq_new_message('{}'::jsonb, content_type => 'application/cloudevents+json',
                                                 subject => 's') m$$),
    ARRAY['s', 'application/cloudevents+json', 'NULL']::text,
    'SN18: named arguments; a given content_type replaces the default');

-- ============================================================ item 2: sbq_send_batch(queue, sbq_new_message[])
SELECT lives_ok(pg_temp.batch('b', $$sbq_send_batch('sn_b', ARRAY[
        sbq_new_message('one'::text, message_id => 'b1', correlation_id => 'c1', subject => 's1', reply_to => 'r1',
                        to_address => 'to1', time_to_live => '1 hour', application_properties => '{"i": 1}'),
        sbq_new_message('{"n": 2}'::jsonb, message_id => 'b2', subject => 's2', reply_to_session_id => 'rs2'),
        sbq_new_message('\x03'::bytea, content_type => 'application/octet-stream',
                        scheduled_enqueue_time => (SELECT t FROM sch)),
        sbq_new_message('four'::text, message_id => 'b4', time_to_live => '2 hours')])$$),
    'SN19: send_batch of four sbq_new_message elements runs');
SELECT ok((SELECT count(*) = 4 AND count(DISTINCT seq) = 4 AND array_agg(seq ORDER BY n) = array_agg(seq ORDER BY seq)
             FROM bs WHERE name = 'b'),
    'SN20: it returns four distinct sequence numbers, ascending in the order of the elements');
SELECT is(pg_temp.props('sn_b', (pg_temp.seqs('b'))[1]),
    ARRAY['b1', encode('one', 'hex'), 'text/plain; charset=utf-8', NULL, 'c1', 's1', 'r1', NULL, 'to1', '01:00:00', 'true',
          '{"i": 1}', 'active'],
    'SN21: the 1st sequence number is the 1st element, stored with its own properties');
SELECT is(pg_temp.props('sn_b', (pg_temp.seqs('b'))[2]),
    ARRAY['b2', encode('{"n": 2}', 'hex'), 'application/json', NULL, NULL, 's2', NULL, 'rs2', NULL, NULL, NULL, NULL, 'active'],
    'SN22: the 2nd is the jsonb element with its own properties (none of the 1st''s)');
SELECT is((SELECT ARRAY[encode(p.body, 'hex'), p.content_type, p.state, (p.scheduled_enqueue_time = sch.t)::text,
                        (p.message_id IS NOT NULL AND p.message_id NOT IN ('b1', 'b2', 'b4'))::text, p.subject]
             FROM sbq_peek('sn_b', 10) p, sch WHERE p.sequence_number = (pg_temp.seqs('b'))[3]),
    ARRAY['03', 'application/octet-stream', 'scheduled', 'true', 'true', NULL],
    'SN23: the 3rd is the scheduled bytea element: a scheduled message at its time, with a message_id of its own');
SELECT is(pg_temp.props('sn_b', (pg_temp.seqs('b'))[4]),
    ARRAY['b4', encode('four', 'hex'), 'text/plain; charset=utf-8', NULL, NULL, NULL, NULL, NULL, NULL, '02:00:00', 'true',
          NULL, 'active'],
    'SN24: the 4th is the text element with its own time to live');
SELECT is((SELECT array_agg(message_id ORDER BY sequence_number) FROM sbq_receive('sn_b', 10)), ARRAY['b1', 'b2', 'b4'],
    'SN25: a receive returns the three active messages, not the scheduled one');
SELECT lives_ok(format('SELECT sbq_cancel_scheduled(%L, %s)', 'sn_b', (pg_temp.seqs('b'))[3]),
    'SN26: the scheduled element can be cancelled as a scheduled message');

-- duplicate detection per message, in order
SELECT lives_ok(pg_temp.batch('dd', $$sbq_send_batch('sn_dd', ARRAY[
        sbq_new_message('x1'::text, message_id => 'D1'), sbq_new_message('x2'::text, message_id => 'D2'),
        sbq_new_message('x3'::text, message_id => 'D1'), sbq_new_message('x4'::text, message_id => 'P')])$$),
    'SN27: send_batch with a repeated message_id and one already sent, on a queue with duplicate detection, runs');
SELECT is(pg_temp.seqs('dd'), ARRAY[(pg_temp.seqs('dd'))[1], (pg_temp.seqs('dd'))[2], (pg_temp.seqs('dd'))[1], (SELECT seq FROM pre)],
    'SN28: the repeat returns the sequence number of the first D1, and P that of the message sent before');
SELECT is((SELECT array_agg(message_id || ':' || convert_from(body, 'UTF8') ORDER BY sequence_number) FROM sbq_peek('sn_dd', 10)),
    ARRAY['P:pre', 'D1:x1', 'D2:x2'], 'SN29: only the first D1 and D2 were stored');
SELECT lives_ok(pg_temp.batch('nd', $$sbq_send_batch('sn_nodup', ARRAY[
        sbq_new_message('y1'::text, message_id => 'R'), sbq_new_message('y2'::text, message_id => 'R')])$$),
    'SN30: send_batch with a repeated message_id on a queue without duplicate detection runs');
SELECT is((SELECT array_agg(message_id || ':' || convert_from(body, 'UTF8') ORDER BY sequence_number) FROM sbq_peek('sn_nodup', 10)),
    ARRAY['R:y1', 'R:y2'], 'SN31: without duplicate detection both are stored');

-- a queue that requires sessions
SELECT * FROM pg_temp.bad('SN32', 'send_batch to a session queue with one element without session_id',
    $$SELECT sbq_send_batch('sn_s', ARRAY[sbq_new_message('a'::text, session_id => 'A'), sbq_new_message('b'::text)])$$, '22023');
SELECT lives_ok(pg_temp.batch('s', $$sbq_send_batch('sn_s', ARRAY[sbq_new_message('a'::text, session_id => 'A'),
        sbq_new_message('b'::text, session_id => 'B'), sbq_new_message('c'::text, session_id => 'A')])$$),
    'SN33: send_batch to a session queue with a session_id on every element runs');
SELECT is((SELECT array_agg(convert_from(body, 'UTF8') || ':' || session_id ORDER BY sequence_number) FROM sbq_peek('sn_s', 10)),
    ARRAY['a:A', 'b:B', 'c:A'], 'SN34: each message is stored with its own session_id');

-- bad elements: all or nothing
SELECT * FROM pg_temp.bad('SN35', 'send_batch with a NULL element',
    $$SELECT sbq_send_batch('sn_b', ARRAY[sbq_new_message('ok'::text), NULL])$$, '22004');
SELECT * FROM pg_temp.bad('SN36', 'send_batch with an element whose body is NULL',
    $$SELECT sbq_send_batch('sn_b', ARRAY[sbq_new_message('ok'::text),
                                         ROW(NULL, 'm', NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)::sbq_new_message])$$,
    '22004');
SELECT * FROM pg_temp.bad('SN37', 'send_batch with an element made by sbq_new_message(NULL::bytea)',
    $$SELECT sbq_send_batch('sn_b', ARRAY[sbq_new_message('ok'::text), sbq_new_message(NULL::bytea, message_id => 'm')])$$,
    '22004');
SELECT * FROM pg_temp.bad('SN38', 'send_batch(q, NULL::sbq_new_message[])',
    $$SELECT sbq_send_batch('sn_b', NULL::sbq_new_message[])$$, '22004');
SELECT * FROM pg_temp.bad('SN39', 'send_batch(NULL, sbq_new_message[])',
    $$SELECT sbq_send_batch(NULL, ARRAY[sbq_new_message('ok'::text)])$$, '22004');
SELECT * FROM pg_temp.bad('SN40', 'send_batch with an empty message_id on the 2nd element',
    $$SELECT sbq_send_batch('sn_b', ARRAY[sbq_new_message('a'::text, message_id => 'ok1'), sbq_new_message('b'::text, message_id => '')])$$,
    '22023');
SELECT * FROM pg_temp.bad('SN41', 'send_batch with application_properties a JSON array on the 2nd element',
    $$SELECT sbq_send_batch('sn_b', ARRAY[sbq_new_message('a'::text), sbq_new_message('b'::text, application_properties => '[1]')])$$,
    '22023');
SELECT * FROM pg_temp.bad('SN42', 'send_batch with application_properties a JSON string',
    $$SELECT sbq_send_batch('sn_b', ARRAY[sbq_new_message('a'::text, application_properties => '"s"')])$$, '22023');
SELECT * FROM pg_temp.bad('SN43', 'send_batch with time_to_live 0 on the last element',
    $$SELECT sbq_send_batch('sn_b', ARRAY[sbq_new_message('a'::text), sbq_new_message('b'::text, time_to_live => '0')])$$,
    '22023');
SELECT * FROM pg_temp.bad('SN44', 'send_batch with time_to_live -1 second',
    $$SELECT sbq_send_batch('sn_b', ARRAY[sbq_new_message('a'::bytea, time_to_live => '-1 second')])$$, '22023');
SELECT * FROM pg_temp.bad('SN45', 'send_batch with a message_id of 129 characters',
    $$SELECT sbq_send_batch('sn_b', ARRAY[sbq_new_message('a'::text), sbq_new_message('b'::text, message_id => repeat('m', 129))])$$,
    '22023');
SELECT * FROM pg_temp.bad('SN46', 'send_batch with a session_id of 129 characters',
    $$SELECT sbq_send_batch('sn_s', ARRAY[sbq_new_message('a'::text, session_id => repeat('s', 129))])$$, '22023');
SELECT * FROM pg_temp.bad('SN47', 'send_batch with a reply_to_session_id of 129 characters',
    $$SELECT sbq_send_batch('sn_b', ARRAY[sbq_new_message('a'::text, reply_to_session_id => repeat('r', 129))])$$, '22023');
SELECT * FROM pg_temp.bad('SN48', 'send_batch with one body over max_message_size (10)',
    $$SELECT sbq_send_batch('sn_small', ARRAY[sbq_new_message('0123456789'::text), sbq_new_message('01234567890'::text)])$$,
    'SB007');
SELECT is(pg_temp.val($$SELECT count(*) FROM sbq_send_batch('sn_small', ARRAY[sbq_new_message('0123456789'::text),
                                                                         sbq_new_message('"01234567"'::jsonb)])$$), '2',
    'SN48b: a text and a jsonb body of exactly max_message_size (10) bytes fit, as with sbq_send (the default content_type does not count)');
SELECT * FROM pg_temp.bad('SN49', 'send_batch to a duplicate-detection queue: a new id, then a bad element (the id not recorded)',
    $$SELECT sbq_send_batch('sn_dup', ARRAY[sbq_new_message('first'::text, message_id => 'N1'),
                                           sbq_new_message('bad'::text, message_id => '')])$$, '22023');
SELECT * FROM pg_temp.bad('SN50', 'send_batch to the dead-letter sub-queue',
    $$SELECT sbq_send_batch('sn_b/$deadletterqueue', ARRAY[sbq_new_message('a'::text)])$$, 'SB010');
SELECT * FROM pg_temp.bad('SN51', 'send_batch to an unknown queue',
    $$SELECT sbq_send_batch('sn_nosuch', ARRAY[sbq_new_message('a'::text)])$$, 'SB001');
SELECT * FROM pg_temp.bad('SN52', 'send_batch of 5001 elements',
    $$SELECT sbq_send_batch('sn_big', ARRAY(SELECT sbq_new_message('m'::text) FROM generate_series(1, 5001)))$$, '22023');
SELECT is(pg_temp.val($$SELECT count(*) FROM sbq_send_batch('sn_dup', ARRAY[sbq_new_message('again'::text, message_id => 'N1')])$$),
    '1', 'SN53: after the failed batch N1 can be sent');
SELECT is((SELECT array_agg(convert_from(body, 'UTF8')) FROM sbq_peek('sn_dup', 100) WHERE message_id = 'N1'), ARRAY['again'],
    'SN54: and it is stored as a new message (the failed batch left no duplicate-detection history)');
SELECT is(pg_temp.val($$SELECT count(*) FROM sbq_send_batch('sn_b', ARRAY[]::sbq_new_message[])$$), '0',
    'SN55: send_batch of no element returns no sequence number');
SELECT lives_ok(pg_temp.batch('big', $$sbq_send_batch('sn_big', ARRAY(SELECT sbq_new_message(i::text, message_id => 'big-' || i)
                                                                  FROM generate_series(1, 5000) i ORDER BY i))$$),
    'SN56: send_batch of 5000 elements runs');
SELECT ok((SELECT count(*) = 5000 AND array_agg(seq ORDER BY n) = array_agg(seq ORDER BY seq) FROM bs WHERE name = 'big')
          AND (SELECT count(*) = 5000 AND bool_and(message_id = 'big-' || convert_from(body, 'UTF8')) FROM sbq_peek('sn_big', 5000)),
    'SN57: 5000 sequence numbers, in order, and 5000 messages each with its own message_id');
SELECT is((SELECT array_agg(message_id ORDER BY sequence_number) FROM sbq_peek('sn_b', 100)), ARRAY['b1', 'b2', 'b4'],
    'SN58: sn_b holds only the messages of the good batch (the failed ones stored nothing)');

SELECT * FROM finish();
ROLLBACK;
