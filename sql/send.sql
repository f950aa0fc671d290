-- send: the three body types, the batch form, properties, limits and errors
\set VERBOSITY sqlstate

SELECT queue FROM sbq_create_queue('s', max_message_size => 16, default_message_ttl => '10 minutes');

-- sequence numbers increase strictly; an untyped literal is text
SELECT sbq_send('s', 'hello') AS seq1 \gset
SELECT sbq_send('s', '\x00ff'::bytea) AS seq2 \gset
SELECT sbq_send('s', '{"n": 1}'::jsonb) AS seq3 \gset
SELECT :seq1 < :seq2 AND :seq2 < :seq3 AS increasing;

-- bodies are stored as bytes; text and jsonb as UTF-8; default content types
SELECT regress.dist(sequence_number, :seq1) AS n, body, content_type, state, delivery_count, lock_token
  FROM sbq_peek('s', 10) ORDER BY 1;

-- the message id is a new UUID unless given; every property is kept
SELECT message_id ~ '^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$' AS uuid_id
  FROM sbq_peek('s', 1);
SELECT sbq_purge_queue('s');
-- (in a queue of the default size: properties count towards max_message_size)
SELECT queue FROM sbq_create_queue('sp');
SELECT sbq_send('sp', 'props', message_id => 'm-1', session_id => 'sess',
                correlation_id => 'corr', subject => 'subj', content_type => 'text/x-custom',
                reply_to => 'replies', reply_to_session_id => 'rs', to_address => 'someone',
                application_properties => '{"k": "v", "n": 2, "nested": {"a": [1]}}') > 0 AS sent;
SELECT message_id, session_id, correlation_id, subject, content_type, reply_to,
       reply_to_session_id, to_address, application_properties, convert_from(body, 'UTF8') AS body
  FROM sbq_peek('sp', 1);

-- time to live: the queue's default applies, and a longer one is capped to it
SELECT sbq_purge_queue('s');
SELECT sbq_send('s', 'default ttl') > 0 AS sent;
SELECT sbq_send('s', 'short ttl', time_to_live => '1 minute') > 0 AS sent;
SELECT sbq_send('s', 'long ttl', time_to_live => '1 day') > 0 AS sent;
SELECT convert_from(body, 'UTF8') AS body, time_to_live, expires_at - enqueued_time AS lifetime
  FROM sbq_peek('s', 10);
SELECT regress.err($$SELECT sbq_send('s', 'x', time_to_live => '0')$$);
SELECT regress.err($$SELECT sbq_send('s', 'x', time_to_live => '-1 second')$$);

-- limits: body over max_message_size is SB007 and stores nothing
SELECT sbq_purge_queue('s');
SELECT regress.err($$SELECT sbq_send('s', repeat('x', 17))$$);
SELECT regress.err($$SELECT sbq_send('s', repeat('é', 9))$$);
SELECT regress.err($$SELECT sbq_send('s', '{"long": "abcdefghij"}'::jsonb)$$);
SELECT regress.err($$SELECT sbq_send('s', repeat('x', 16))$$);
SELECT regress.err($$SELECT sbq_send('s', message_id => repeat('m', 129), body => 'x')$$);
SELECT regress.err($$SELECT sbq_send('sp', message_id => repeat('m', 128), body => 'x')$$);
SELECT regress.err($$SELECT sbq_send('s', message_id => '', body => 'x')$$);
SELECT regress.err($$SELECT sbq_send('s', session_id => repeat('s', 129), body => 'x')$$);
-- an empty session id, to a queue without sessions too (it was stored as '')
SELECT regress.err($$SELECT sbq_send('s', session_id => '', body => 'x')$$);
SELECT regress.err($$SELECT sbq_send_batch('s', ARRAY[sbq_new_message('x'::text, session_id => '')])$$);
SELECT regress.err($$SELECT sbq_send('s', reply_to_session_id => repeat('s', 129), body => 'x')$$);
SELECT regress.err($$SELECT sbq_send('s', 'x', application_properties => '[1, 2]')$$);
SELECT regress.err($$SELECT sbq_send('s', 'x', application_properties => '"scalar"')$$);
SELECT regress.err($$SELECT sbq_send('s', 'x', application_properties => 'null')$$);
SELECT regress.err($$SELECT sbq_send('s', 'x', scheduled_enqueue_time => 'infinity')$$);
SELECT regress.err($$SELECT sbq_send('s', NULL::text)$$);
SELECT regress.err($$SELECT sbq_send('s', NULL::bytea)$$);
SELECT regress.err($$SELECT sbq_send('s', NULL::jsonb)$$);
SELECT regress.err($$SELECT sbq_send(NULL, 'x')$$);
SELECT regress.err($$SELECT sbq_send('missing', 'x')$$);
SELECT regress.err($$SELECT sbq_send('bad name', 'x')$$);
SELECT regress.err($$SELECT sbq_send('s/$deadletterqueue', 'x')$$);
SELECT count(*) AS stored FROM sbq_peek('s', 100);

-- batches: in order, all or nothing
SELECT sbq_purge_queue('s');
SELECT array_agg(seq ORDER BY ord) = array_agg(seq ORDER BY seq) AS in_order, count(*)
  FROM sbq_send_batch('s', ARRAY['one', 'two', 'three']) WITH ORDINALITY AS b(seq, ord);
SELECT count(*) FROM sbq_send_batch('s', ARRAY['\x01'::bytea, '\x02'::bytea]);
SELECT count(*) FROM sbq_send_batch('s', ARRAY['{"a": 1}'::jsonb]);
SELECT count(*) FROM sbq_send_batch('s', ARRAY[]::text[]);
SELECT body, content_type FROM sbq_peek('s', 10);
SELECT regress.err($$SELECT sbq_send_batch('s', ARRAY['ok', repeat('x', 17)])$$);
SELECT regress.err($$SELECT sbq_send_batch('s', ARRAY['ok', NULL])$$);
SELECT regress.err($$SELECT sbq_send_batch('s', NULL::text[])$$);
SELECT regress.err($$SELECT sbq_send_batch('missing', ARRAY['x'])$$);
SELECT regress.err($$SELECT sbq_send_batch('s', ARRAY['x'], application_properties => '1')$$);
SELECT count(*) AS stored FROM sbq_peek('s', 100);

-- a send commits with the caller's transaction: rolled back, it never happened
SELECT sbq_purge_queue('s');
BEGIN;
SELECT sbq_send('s', 'rolled back') > 0 AS sent;
SELECT count(*) AS inside FROM sbq_peek('s', 10);
ROLLBACK;
SELECT count(*) AS after_rollback FROM sbq_peek('s', 10);
SELECT sent FROM sbq_queue_stats WHERE queue = 's';

-- a send in a read-only transaction is refused with 25006
BEGIN READ ONLY;
SELECT regress.err($$SELECT sbq_send('s', 'x')$$);
ROLLBACK;

SELECT sbq_delete_queue('s');
