-- sbqueue pgTAP: sends to a topic (0.10): fan-out to the subscriptions whose rules match.
-- sbq_send (text, bytea, jsonb) and sbq_send_batch (arrays, sbq_new_message[]) to a topic:
-- one copy per subscription whose rules match, with the message's properties and body
-- (R10.1), and a subscription behaves as a queue: receive, peek, complete, dead-letter in
-- one subscription leave the others alone, the dead letter stays in the subscription's
-- dead-letter sub-queue (J.83); a message no subscription takes is dropped and counted
-- (R10.2, sbq_topic_stats.dropped); $Default is the true filter (R10.4); several matching
-- rules without action make ONE copy (R10.5); a correlation filter matches when every
-- property it names is equal, strings case-sensitively, the message's default content
-- type included (R10.7); rule changes take effect on the next send; the number a send
-- returns is the topic's, the copies have their own; the topic's duplicate detection
-- (a duplicate returns the first number and stores nothing), its TTL cap (and the
-- subscription's below it), its max_message_size (SB007); scheduled sends make
-- scheduled copies and sbq_cancel_scheduled(topic, n) cancels all of them (SB003 after);
-- a matching message without session_id is dead-lettered in a session subscription
-- (reason "Session id is null.", R9.2) and the send goes on, and session receive works
-- on a subscription; a rolled-back
-- send leaves no copy. Correlation filters are indexed by one property each (0.11): a
-- send compares only those whose property and value it has, and gets the same copies
-- as if it compared all. Management and rights: topics.sql.
BEGIN;
SELECT plan(86);

\ir bad_input_setup.psql

-- The copies of topic t in its subscriptions, as 'subscription:body' sorted (peek,
-- every state, the main queues only).
CREATE FUNCTION pg_temp.copies(_t text) RETURNS text[] LANGUAGE sql AS $$
    SELECT coalesce(array_agg(s.subscription || ':' || convert_from(p.body, 'UTF8')
                              ORDER BY s.subscription COLLATE "C", p.sequence_number), '{}')
      FROM sbq_subscriptions s, LATERAL sbq_peek(s.topic || '/subscriptions/' || s.subscription, 1000) p
     WHERE s.topic = _t
$$;

-- The subscriptions of topic t that got a copy with this body.
CREATE FUNCTION pg_temp.got(_t text, _body text) RETURNS text[] LANGUAGE sql AS $$
    SELECT coalesce(array_agg(s.subscription ORDER BY s.subscription COLLATE "C"), '{}')
      FROM sbq_subscriptions s, LATERAL sbq_peek(s.topic || '/subscriptions/' || s.subscription, 1000) p
     WHERE s.topic = _t AND convert_from(p.body, 'UTF8') = _body
$$;

-- Sequence numbers returned by sends, by name.
CREATE TEMP TABLE n (k text PRIMARY KEY, seq bigint);

-- ------------------------------------------------------------ fixtures
-- ts_f: a ($Default), b (subject = red), c (two rules, both match a red message
-- with color red), d (no rule at all: gets nothing).
DO $$ BEGIN
    PERFORM sbq_create_topic('ts_f');
    PERFORM sbq_create_subscription('ts_f', 'a');
    PERFORM sbq_create_subscription('ts_f', 'b');
    PERFORM sbq_remove_rule('ts_f', 'b', '$Default');
    PERFORM sbq_add_rule('ts_f', 'b', 'red', correlation_filter => '{"subject": "red"}');
    PERFORM sbq_create_subscription('ts_f', 'c');
    PERFORM sbq_remove_rule('ts_f', 'c', '$Default');
    PERFORM sbq_add_rule('ts_f', 'c', 'bysubject', correlation_filter => '{"subject": "red"}');
    PERFORM sbq_add_rule('ts_f', 'c', 'byprop', correlation_filter => '{"properties": {"color": "red"}}');
    PERFORM sbq_create_subscription('ts_f', 'd');
    PERFORM sbq_remove_rule('ts_f', 'd', '$Default');
END $$;

-- ============================================================ fan-out (R10.1, R10.4, R10.5)
INSERT INTO n VALUES ('f1', sbq_send('ts_f', 'f1'::text, subject => 'red',
                                     application_properties => '{"color": "red"}'));
SELECT is(pg_temp.got('ts_f', 'f1'), ARRAY['a', 'b', 'c'],
    'R10.1: a send to a topic puts a copy in each subscription whose rules match');
SELECT is((SELECT count(*)::int FROM sbq_peek('ts_f/subscriptions/c', 100) WHERE convert_from(body, 'UTF8') = 'f1'), 1,
    'R10.5: two matching rules without action make ONE copy in the subscription');
SELECT is(pg_temp.got('ts_f', 'f1') @> ARRAY['d'], false,
    'a subscription without rules gets nothing');
SELECT is(
    (SELECT array_agg(DISTINCT ROW(subject, application_properties::text, content_type)::text)
       FROM sbq_subscriptions s, LATERAL sbq_peek('ts_f/subscriptions/' || s.subscription, 100) p
      WHERE s.topic = 'ts_f' AND convert_from(p.body, 'UTF8') = 'f1'),
    ARRAY['(red,"{""color"": ""red""}","text/plain; charset=utf-8")'],
    'R10.1: each copy carries the message''s properties');
SELECT is(
    (SELECT count(*)::int FROM sbq_subscriptions s, LATERAL sbq_peek('ts_f/subscriptions/' || s.subscription, 100) p
      WHERE s.topic = 'ts_f' AND p.sequence_number = (SELECT seq FROM n WHERE k = 'f1')),
    0, 'the number returned is the topic''s: no copy has it as its sequence number');
SELECT is(
    (SELECT count(DISTINCT p.sequence_number)::int
       FROM sbq_subscriptions s, LATERAL sbq_peek('ts_f/subscriptions/' || s.subscription, 100) p
      WHERE s.topic = 'ts_f' AND convert_from(p.body, 'UTF8') = 'f1'),
    3, 'each copy has a sequence number of its own');
SELECT cmp_ok((SELECT min(p.sequence_number) FROM sbq_peek('ts_f/subscriptions/a', 100) p), '>',
    (SELECT seq FROM n WHERE k = 'f1'), 'the copies'' numbers come after the topic''s');

INSERT INTO n VALUES ('f2', sbq_send('ts_f', 'f2'::text, application_properties => '{"color": "red"}'));
SELECT is(pg_temp.got('ts_f', 'f2'), ARRAY['a', 'c'],
    'R10.5: rules are OR-ed: one matching rule of several is enough');

-- R10.1: settling in one subscription leaves the others alone
SELECT lives_ok($$SELECT sbq_complete('ts_f/subscriptions/a', (SELECT lock_token FROM sbq_receive('ts_f/subscriptions/a', 1)))$$,
    'R10.1: receive and complete the first copy in subscription a');
SELECT is(pg_temp.got('ts_f', 'f1'), ARRAY['b', 'c'],
    'R10.1: completing in a subscription does not remove the copies of the others');
SELECT is((SELECT state FROM sbq_peek('ts_f/subscriptions/b', 1)), 'active',
    'R10.1: the copy in b is still active (not locked) after a receive in a');

-- J.83: dead-lettering stays in the subscription
SELECT lives_ok($$SELECT sbq_deadletter('ts_f/subscriptions/b', (SELECT lock_token FROM sbq_receive('ts_f/subscriptions/b', 1)), 'bad', 'very bad')$$,
    'J.83: dead-letter a copy in subscription b');
SELECT is((SELECT ROW(convert_from(body, 'UTF8'), dead_letter_reason, dead_letter_error_description)::text
             FROM sbq_peek('ts_f/subscriptions/b/$deadletterqueue', 10)),
    '(f1,bad,"very bad")', 'J.83: the dead letter is in the subscription''s dead-letter sub-queue');
SELECT is((SELECT count(*)::int FROM sbq_peek('ts_f/subscriptions/c/$deadletterqueue', 10))
        + (SELECT count(*)::int FROM sbq_peek('ts_f/subscriptions/a/$deadletterqueue', 10)), 0,
    'J.83: the other subscriptions'' dead-letter sub-queues stay empty');
SELECT is(pg_temp.got('ts_f', 'f1'), ARRAY['c'], 'J.83: c keeps its copy of f1');
SELECT lives_ok($$SELECT sbq_complete('ts_f/subscriptions/b/$deadletterqueue',
                    (SELECT lock_token FROM sbq_receive('ts_f/subscriptions/b/$deadletterqueue', 1)))$$,
    'a subscription''s dead letter is received and completed from its sub-queue');
SELECT is((SELECT ROW(active_count, dead_letter_count, completed, dead_lettered)::text
             FROM sbq_queue_stats WHERE queue = 'ts_f/subscriptions/b'),
    '(0,0,1,1)', 'sbq_queue_stats counts per subscription');

-- ============================================================ R10.2: no match, dropped
SELECT is((SELECT ROW(subscription_count, sent, dropped)::text FROM sbq_topic_stats WHERE topic = 'ts_f'),
    '(4,2,0)', 'sbq_topic_stats before any drop');
DO $$ BEGIN
    PERFORM sbq_remove_rule('ts_f', 'a', '$Default');
END $$;
INSERT INTO n VALUES ('f3', sbq_send('ts_f', 'f3'::text, subject => 'blue'));
SELECT isnt((SELECT seq FROM n WHERE k = 'f3'), NULL::bigint,
    'R10.2: a send no subscription matches still returns a number');
SELECT is(pg_temp.got('ts_f', 'f3'), '{}'::text[],
    'R10.2: no subscription matches: the message is dropped, no copy stored');
SELECT is((SELECT ROW(sent, dropped)::text FROM sbq_topic_stats WHERE topic = 'ts_f'), '(3,1)',
    'R10.2: sbq_topic_stats counts it as sent and dropped');
SELECT is(pg_temp.got('ts_f', 'f2'), ARRAY['a', 'c'],
    'removing $Default does not touch the copies already stored');

-- rule changes count at the next send, in the same transaction
DO $$ BEGIN
    PERFORM sbq_add_rule('ts_f', 'd', 'blue', correlation_filter => '{"subject": "blue"}');
END $$;
SELECT sbq_send('ts_f', 'f4'::text, subject => 'blue') IS NOT NULL AS sent \gset
SELECT is(pg_temp.got('ts_f', 'f4'), ARRAY['d'], 'a rule added is used by the next send');
DO $$ BEGIN
    PERFORM sbq_remove_rule('ts_f', 'd', 'blue');
END $$;
SELECT sbq_send('ts_f', 'f5'::text, subject => 'blue') IS NOT NULL AS sent \gset
SELECT is(pg_temp.got('ts_f', 'f5'), '{}'::text[], 'a rule removed is no longer used by the next send');
SELECT is((SELECT dropped FROM sbq_topic_stats WHERE topic = 'ts_f'), 2::bigint,
    'R10.2: the second drop is counted');

-- ============================================================ R10.7: correlation filters
DO $$ BEGIN
    PERFORM sbq_create_topic('ts_c');
    PERFORM sbq_create_subscription('ts_c', 'all7');
    PERFORM sbq_remove_rule('ts_c', 'all7', '$Default');
    PERFORM sbq_add_rule('ts_c', 'all7', 'r', correlation_filter =>
        '{"correlation_id": "C", "message_id": "M", "to": "T", "reply_to": "R", "subject": "S",
          "reply_to_session_id": "RS", "content_type": "application/x"}');
    PERFORM sbq_create_subscription('ts_c', 'props');
    PERFORM sbq_remove_rule('ts_c', 'props', '$Default');
    PERFORM sbq_add_rule('ts_c', 'props', 'r', correlation_filter =>
        '{"properties": {"n": 1, "s": "x", "b": true, "z": null}}');
    PERFORM sbq_create_subscription('ts_c', 'ct');
    PERFORM sbq_remove_rule('ts_c', 'ct', '$Default');
    PERFORM sbq_add_rule('ts_c', 'ct', 'r', correlation_filter => '{"content_type": "application/json"}');
    PERFORM sbq_create_subscription('ts_c', 'sess');
    PERFORM sbq_remove_rule('ts_c', 'sess', '$Default');
    PERFORM sbq_add_rule('ts_c', 'sess', 'r', correlation_filter => '{"session_id": "S1"}');
END $$;
SELECT sbq_send('ts_c', 'c1'::text, correlation_id => 'C', message_id => 'M', to_address => 'T', reply_to => 'R',
                subject => 'S', reply_to_session_id => 'RS', content_type => 'application/x') IS NOT NULL AS sent \gset
SELECT is(pg_temp.got('ts_c', 'c1'), ARRAY['all7'], 'R10.7: every system property named equal: match');
SELECT sbq_send('ts_c', 'c2'::text, correlation_id => 'C', message_id => 'M', to_address => 'T', reply_to => 'R',
                subject => 's', reply_to_session_id => 'RS', content_type => 'application/x') IS NOT NULL AS sent \gset
SELECT is(pg_temp.got('ts_c', 'c2'), '{}'::text[], 'R10.7: strings compare case-sensitively (subject s vs S): no match');
SELECT sbq_send('ts_c', 'c3'::text, correlation_id => 'C', message_id => 'M', to_address => 'T', reply_to => 'R',
                subject => 'S', content_type => 'application/x') IS NOT NULL AS sent \gset
SELECT is(pg_temp.got('ts_c', 'c3'), '{}'::text[], 'R10.7: fields are AND-ed: one missing property (reply_to_session_id) fails the match');
SELECT sbq_send('ts_c', 'c4'::text, correlation_id => 'C', message_id => 'M', to_address => 'T ', reply_to => 'R',
                subject => 'S', reply_to_session_id => 'RS', content_type => 'application/x') IS NOT NULL AS sent \gset
SELECT is(pg_temp.got('ts_c', 'c4'), '{}'::text[], 'R10.7: exact equality (to "T " vs "T"): no match');
SELECT sbq_send('ts_c', 'c5'::text, application_properties => '{"n": 1.0, "s": "x", "b": true, "z": null, "extra": 5}') IS NOT NULL AS sent \gset
SELECT is(pg_temp.got('ts_c', 'c5'), ARRAY['props'], 'R10.7: application properties equal (number by value, extra ones ignored): match');
SELECT sbq_send('ts_c', 'c6'::text, application_properties => '{"n": "1", "s": "x", "b": true, "z": null}') IS NOT NULL AS sent \gset
SELECT is(pg_temp.got('ts_c', 'c6'), '{}'::text[], 'R10.7: the string "1" is not the number 1: no match');
SELECT sbq_send('ts_c', 'c7'::text, application_properties => '{"n": 1, "s": "X", "b": true, "z": null}') IS NOT NULL AS sent \gset
SELECT is(pg_temp.got('ts_c', 'c7'), '{}'::text[], 'R10.7: application property strings are case-sensitive: no match');
SELECT sbq_send('ts_c', 'c8'::text, application_properties => '{"n": 1, "s": "x", "b": true}') IS NOT NULL AS sent \gset
SELECT is(pg_temp.got('ts_c', 'c8'), '{}'::text[], 'R10.7: a property the filter names as null must be there: absent fails');
SELECT sbq_send('ts_c', '{"k": 1}'::jsonb) IS NOT NULL AS sent \gset
SELECT is(pg_temp.got('ts_c', '{"k": 1}'), ARRAY['ct'], 'R10.7: a jsonb body''s default content type application/json matches');
SELECT sbq_send('ts_c', 'c9'::text, session_id => 'S1') IS NOT NULL AS sent \gset
SELECT is(pg_temp.got('ts_c', 'c9'), ARRAY['sess'], 'R10.7: session_id matches');
SELECT sbq_send('ts_c', 'c10'::text, session_id => 's1') IS NOT NULL AS sent \gset
SELECT is(pg_temp.got('ts_c', 'c10'), '{}'::text[], 'R10.7: session_id compares case-sensitively');

-- ============================================================ duplicates, TTL, size
DO $$ BEGIN
    PERFORM sbq_create_topic('ts_d', duplicate_detection_window => '10 minutes', default_message_ttl => '1 hour',
                             max_message_size => 200);
    PERFORM sbq_create_subscription('ts_d', 'x');
    PERFORM sbq_create_subscription('ts_d', 'short', default_message_ttl => '10 minutes');
END $$;
INSERT INTO n VALUES ('d1', sbq_send('ts_d', 'd1'::text, message_id => 'dup'));
INSERT INTO n VALUES ('d2', sbq_send('ts_d', 'd2'::text, message_id => 'dup'));
SELECT is((SELECT seq FROM n WHERE k = 'd2'), (SELECT seq FROM n WHERE k = 'd1'),
    'duplicates: a duplicate send to a topic returns the first send''s number');
SELECT is(pg_temp.copies('ts_d'), ARRAY['short:d1', 'x:d1'], 'duplicates: the duplicate stores nothing in any subscription');
SELECT is((SELECT sent FROM sbq_topic_stats WHERE topic = 'ts_d'), 1::bigint, 'duplicates: a duplicate is not counted as sent');
INSERT INTO n VALUES ('d3', sbq_send('ts_d', 'd3'::text, message_id => 'DUP'));
SELECT isnt((SELECT seq FROM n WHERE k = 'd3'), (SELECT seq FROM n WHERE k = 'd1'),
    'duplicates: message ids compare case-sensitively (DUP is new)');
SELECT is((SELECT array_agg(DISTINCT time_to_live::text) FROM sbq_peek('ts_d/subscriptions/x', 10)), ARRAY['01:00:00'],
    'TTL: a message without TTL gets the topic''s default');
SELECT sbq_send('ts_d', 't1'::text, time_to_live => '1 day') IS NOT NULL AS sent \gset
SELECT is((SELECT time_to_live FROM sbq_peek('ts_d/subscriptions/x', 10) WHERE convert_from(body, 'UTF8') = 't1'),
    '01:00:00'::interval, 'TTL: the topic''s default caps a longer TTL');
SELECT is((SELECT time_to_live FROM sbq_peek('ts_d/subscriptions/short', 10) WHERE convert_from(body, 'UTF8') = 't1'),
    '00:10:00'::interval, 'TTL: a subscription''s shorter default caps its copy');
SELECT sbq_send('ts_d', 't2'::text, time_to_live => '5 minutes') IS NOT NULL AS sent \gset
SELECT is((SELECT array_agg(time_to_live::text) FROM sbq_subscriptions s, LATERAL sbq_peek('ts_d/subscriptions/' || s.subscription, 10) p
            WHERE s.topic = 'ts_d' AND convert_from(p.body, 'UTF8') = 't2'),
    ARRAY['00:05:00', '00:05:00'], 'TTL: a shorter TTL of its own is kept in every copy');
SELECT throws_ok($$SELECT sbq_send('ts_d', repeat('z', 300))$$, 'SB007', NULL,
    'max_message_size: a message over the topic''s size is refused (SB007)');
SELECT is(pg_temp.got('ts_d', repeat('z', 300)), '{}'::text[], 'max_message_size: nothing stored');

-- ============================================================ scheduled and cancel
DO $$ BEGIN
    PERFORM sbq_create_topic('ts_s');
    PERFORM sbq_create_subscription('ts_s', 'p');
    PERFORM sbq_create_subscription('ts_s', 'q');
END $$;
INSERT INTO n VALUES ('s1', sbq_send('ts_s', 's1'::text, scheduled_enqueue_time => now() + interval '1 day'));
INSERT INTO n VALUES ('s2', sbq_send('ts_s', 's2'::text, scheduled_enqueue_time => now() + interval '1 day'));
SELECT is((SELECT array_agg(x.subscription || ':' || x.state ORDER BY x.subscription)
             FROM (SELECT s.subscription, p.state FROM sbq_subscriptions s,
                          LATERAL sbq_peek('ts_s/subscriptions/' || s.subscription, 10) p
                    WHERE s.topic = 'ts_s' AND convert_from(p.body, 'UTF8') = 's1') x),
    ARRAY['p:scheduled', 'q:scheduled'], 'scheduled: a scheduled send makes a scheduled copy in each subscription');
SELECT is((SELECT sum(scheduled_count)::int FROM sbq_queue_stats WHERE queue LIKE 'ts_s/%'), 4,
    'scheduled: sbq_queue_stats counts the scheduled copies');
SELECT lives_ok(format('SELECT sbq_cancel_scheduled(%L, %s)', 'ts_s', (SELECT seq FROM n WHERE k = 's1')),
    'scheduled: sbq_cancel_scheduled(topic, n) with the topic''s number');
SELECT is(pg_temp.copies('ts_s'), ARRAY['p:s2', 'q:s2'], 'scheduled: cancel removes every copy of that message, and only those');
SELECT throws_ok(format('SELECT sbq_cancel_scheduled(%L, %s)', 'ts_s', (SELECT seq FROM n WHERE k = 's1')), 'SB003',
    format('no scheduled message with sequence number %s on topic "ts_s"', (SELECT seq FROM n WHERE k = 's1')),
    'scheduled: a second cancel of the same number is SB003');
SELECT throws_ok(format('SELECT sbq_cancel_scheduled(%L, %s)', 'ts_s',
                        (SELECT sequence_number FROM sbq_peek('ts_s/subscriptions/p', 1))), 'SB003', NULL,
    'scheduled: a copy''s own number is no number of the topic (SB003)');
SELECT is(pg_temp.copies('ts_s'), ARRAY['p:s2', 'q:s2'], 'scheduled: the refused cancel changed nothing');
-- subscriptions that forward into a queue with duplicate detection: the second copy
-- is a duplicate there, and a message another sender sent there with the same id is
-- no copy of the topic's; the send used to tie that number twice (23505), or tie
-- the other sender's message, which the cancel then deleted
DO $$ BEGIN
    PERFORM sbq_create_queue('ts_dd', duplicate_detection_window => '1 minute');
    PERFORM sbq_create_topic('ts_fw');
    PERFORM sbq_create_subscription('ts_fw', 'a', forward_to => 'ts_dd');
    PERFORM sbq_create_subscription('ts_fw', 'b', forward_to => 'ts_dd');
END $$;
INSERT INTO n VALUES ('fw1', sbq_send('ts_fw', 'fw1'::text, message_id => 'fw-one',
                                      scheduled_enqueue_time => now() + interval '1 day'));
SELECT is((SELECT count(*) FROM sbq_peek('ts_dd', 10)), 1::bigint,
    'scheduled: two copies forwarded into a queue with duplicate detection store one message');
INSERT INTO n VALUES ('own', sbq_send('ts_dd', 'own'::text, message_id => 'fw-two',
                                      scheduled_enqueue_time => now() + interval '1 day'));
INSERT INTO n VALUES ('fw2', sbq_send('ts_fw', 'fw2'::text, message_id => 'fw-two',
                                      scheduled_enqueue_time => now() + interval '1 day'));
SELECT throws_ok(format('SELECT sbq_cancel_scheduled(%L, %s)', 'ts_fw', (SELECT seq FROM n WHERE k = 'fw2')),
    'SB003', NULL, 'scheduled: a topic message all of whose copies were duplicates has nothing to cancel');
SELECT is((SELECT array_agg(convert_from(body, 'UTF8') ORDER BY sequence_number) FROM sbq_peek('ts_dd', 10)),
    ARRAY['fw1', 'own'], '... and the other sender''s message with that id stays');
SELECT lives_ok(format('SELECT sbq_cancel_scheduled(%L, %s)', 'ts_fw', (SELECT seq FROM n WHERE k = 'fw1')),
    'scheduled: the first topic message is cancelled');
SELECT is((SELECT array_agg(convert_from(body, 'UTF8')) FROM sbq_peek('ts_dd', 10)), ARRAY['own'],
    '... with its one copy');

-- ============================================================ sessions
DO $$ BEGIN
    PERFORM sbq_create_topic('ts_x');
    PERFORM sbq_create_subscription('ts_x', 'plain');
    PERFORM sbq_create_subscription('ts_x', 'sessions', requires_session => true);
END $$;
SELECT lives_ok($$SELECT sbq_send('ts_x', 'nosession'::text)$$,
    'R9.2: a message without session_id that a session subscription matches does not fail the send (J.73)');
SELECT is(pg_temp.copies('ts_x'), ARRAY['plain:nosession'], 'R9.2: the subscription without sessions gets its copy');
SELECT is((SELECT dead_letter_reason FROM sbq_peek('ts_x/subscriptions/sessions/$deadletterqueue', 10)
            WHERE convert_from(body, 'UTF8') = 'nosession'),
    'Session id is null.', 'R9.2: the session subscription''s copy is dead-lettered, reason "Session id is null." (J.73)');
SELECT sbq_send('ts_x', 'withsession'::text, session_id => 'S') IS NOT NULL AS sent \gset
SELECT is((SELECT convert_from(m.body, 'UTF8') FROM sbq_accept_session('ts_x/subscriptions/sessions', 'S') a,
                  LATERAL sbq_receive_session('ts_x/subscriptions/sessions', a.session_token) m),
    'withsession', 'sessions: a session of a subscription is accepted and received from');
SELECT is((SELECT session_id FROM sbq_peek('ts_x/subscriptions/plain', 10) WHERE convert_from(body, 'UTF8') = 'withsession'), 'S',
    'sessions: the copy in a subscription without sessions keeps the session_id');
-- resubmitting the copy that came in no session would leave it where no call
-- receives it: named, 22023; all, it stays while the others go back
SELECT sbq_send('ts_x', 'withsession2'::text, session_id => 'S2') IS NOT NULL AS sent \gset
SELECT sbq_deadletter('ts_x/subscriptions/sessions', m.lock_token) IS NOT NULL AS dead
  FROM sbq_accept_session('ts_x/subscriptions/sessions', 'S2') a,
       LATERAL sbq_receive_session('ts_x/subscriptions/sessions', a.session_token) m \gset
SELECT throws_ok(format('SELECT sbq_resubmit(%L, ARRAY[%s::bigint])', 'ts_x/subscriptions/sessions',
                        (SELECT sequence_number FROM sbq_peek('ts_x/subscriptions/sessions/$deadletterqueue', 10)
                          WHERE session_id IS NULL)),
    '22023', NULL, 'resubmit: a dead letter in no session, named, to a subscription that requires sessions is 22023');
SELECT is(sbq_resubmit('ts_x/subscriptions/sessions'), 1,
    'resubmit of all: the one in session S2 goes back (it resubmitted the one in no session too)');
SELECT is(ARRAY(SELECT convert_from(body, 'UTF8') FROM sbq_peek('ts_x/subscriptions/sessions/$deadletterqueue', 10)),
    ARRAY['nosession'], '... and the one in no session stays a dead letter');

-- ============================================================ batches
DO $$ BEGIN
    PERFORM sbq_create_topic('ts_b');
    PERFORM sbq_create_subscription('ts_b', 'all');
    PERFORM sbq_create_subscription('ts_b', 'red');
    PERFORM sbq_remove_rule('ts_b', 'red', '$Default');
    PERFORM sbq_add_rule('ts_b', 'red', 'r', correlation_filter => '{"subject": "red"}');
END $$;
CREATE TEMP TABLE bs AS SELECT * FROM sbq_send_batch('ts_b', ARRAY['b1', 'b2']::text[], subject => 'red') WITH ORDINALITY x(seq, o);
SELECT is((SELECT count(DISTINCT seq)::int FROM bs), 2, 'batch text[]: one topic number per message');
SELECT is(pg_temp.copies('ts_b'), ARRAY['all:b1', 'all:b2', 'red:b1', 'red:b2'],
    'batch text[]: each message copied to each matching subscription, in order');
SELECT is((SELECT count(*)::int FROM sbq_send_batch('ts_b', ARRAY['\x6231'::bytea, '\x6232'::bytea])), 2,
    'batch bytea[]: sent');
SELECT is((SELECT count(*)::int FROM sbq_send_batch('ts_b', ARRAY['{"j": 1}'::jsonb])), 1, 'batch jsonb[]: sent');
SELECT is(pg_temp.got('ts_b', '{"j": 1}'), ARRAY['all'], 'batch jsonb[]: copied where the rules match');
SELECT is((SELECT count(*)::int FROM sbq_send_batch('ts_b', ARRAY[
              sbq_new_message('m-red'::text, subject => 'red'),
              sbq_new_message('m-blue'::text, subject => 'blue')])), 2,
    'batch sbq_new_message[]: one number per message');
SELECT is(pg_temp.got('ts_b', 'm-red') || pg_temp.got('ts_b', 'm-blue'), ARRAY['all', 'red', 'all'],
    'batch sbq_new_message[]: each message matched by its own properties');
SELECT is((SELECT ROW(sent, dropped)::text FROM sbq_topic_stats WHERE topic = 'ts_b'), '(7,0)',
    'batches: sbq_topic_stats counts each message of a batch');

-- ============================================================ rollback
SAVEPOINT before_send;
SELECT sbq_send('ts_b', 'rolled-back'::text) IS NOT NULL AS sent \gset
ROLLBACK TO SAVEPOINT before_send;
SELECT is(pg_temp.got('ts_b', 'rolled-back'), '{}'::text[],
    'a send to a topic rolled back leaves no copy in any subscription');

-- ------------------------------------------------------------ the correlation index (0.11)
-- Each subscription of ts_ci has correlation filters anchored in different ways (a system
-- property, an application property, the default content type, none: numbers only, or
-- an empty filter); every send must get exactly the copies a comparison of every filter
-- gives.
DO $$ BEGIN
    PERFORM sbq_create_topic('ts_ci');
    PERFORM sbq_create_subscription('ts_ci', s) FROM unnest(ARRAY['sys', 'prop', 'num', 'ct', 'all', 'x1', 'x2', 'eq', 'acts']) s;
    PERFORM sbq_remove_rule('ts_ci', s, '$Default') FROM unnest(ARRAY['sys', 'prop', 'num', 'ct', 'all', 'x1', 'x2', 'eq', 'acts']) s;
    PERFORM sbq_add_rule('ts_ci', 'sys', 'r', correlation_filter => '{"correlation_id": "c1", "subject": "red"}');
    PERFORM sbq_add_rule('ts_ci', 'prop', 'r', correlation_filter => '{"properties": {"region": "eu", "n": 5}}');
    PERFORM sbq_add_rule('ts_ci', 'num', 'r', correlation_filter => '{"properties": {"n": 5}}');
    PERFORM sbq_add_rule('ts_ci', 'ct', 'r', correlation_filter => '{"content_type": "text/plain; charset=utf-8"}');
    PERFORM sbq_add_rule('ts_ci', 'all', 'r', correlation_filter => '{}');
    PERFORM sbq_add_rule('ts_ci', 'x1', 'r', correlation_filter => '{"to": "x"}');
    PERFORM sbq_add_rule('ts_ci', 'x1', 'r2', correlation_filter => '{"to": "y"}');
    PERFORM sbq_add_rule('ts_ci', 'x2', 'r', correlation_filter => '{"to": "x"}');
    PERFORM sbq_add_rule('ts_ci', 'eq', 'r', correlation_filter => '{"properties": {"a": "b=c"}}');
    PERFORM sbq_add_rule('ts_ci', 'acts', 'red', correlation_filter => '{"subject": "red"}', action => 'SET sys.To = ''r''');
    PERFORM sbq_add_rule('ts_ci', 'acts', 'eu', correlation_filter => '{"properties": {"region": "eu"}}', action => 'SET sys.To = ''e''');
END $$;
SELECT lives_ok($$SELECT sbq_send('ts_ci', 'm1', correlation_id => 'c1', subject => 'red',
                                  application_properties => '{"region": "eu", "n": 5}')$$, 'm1: every anchor of several filters');
SELECT is(pg_temp.got('ts_ci', 'm1'), ARRAY['acts', 'acts', 'all', 'ct', 'num', 'prop', 'sys'],
    'R10.7: m1 matches by system and application properties, a number, the default content type, the empty filter, two rules with actions');
SELECT is((SELECT array_agg(to_address ORDER BY to_address) FROM sbq_peek('ts_ci/subscriptions/acts', 10)), ARRAY['e', 'r'],
    '... each rule with an action its own copy');
SELECT lives_ok($$SELECT sbq_send('ts_ci', 'm2', correlation_id => 'c1', subject => 'blue',
                                  application_properties => '{"region": "us", "n": 5.0}')$$, 'm2: one anchor holds, another property does not');
SELECT is(pg_temp.got('ts_ci', 'm2'), ARRAY['all', 'ct', 'num'],
    'R10.7: the anchor''s property alone is not a match; 5.0 equals 5');
SELECT lives_ok($$SELECT sbq_send('ts_ci', convert_to('m3', 'UTF8'), to_address => 'x')$$, 'm3: bytes, to x');
SELECT is(pg_temp.got('ts_ci', 'm3'), ARRAY['all', 'x1', 'x2'],
    'R10.7: two subscriptions with the same anchor both match; bytes have no default content type');
SELECT lives_ok($$SELECT sbq_send('ts_ci', 'm4', application_properties => '{"a=b": "c"}'),
                         sbq_send('ts_ci', 'm5', application_properties => '{"a": "b=c"}'),
                         (SELECT array_agg(b) FROM sbq_send_batch('ts_ci', ARRAY['m6', 'm7'], to_address => 'y') b)$$,
    'm4 and m5: a name and a value that read alike; m6 and m7 in a batch');
SELECT is(pg_temp.got('ts_ci', 'm4') || pg_temp.got('ts_ci', 'm5') || pg_temp.got('ts_ci', 'm6') || pg_temp.got('ts_ci', 'm7'),
    ARRAY['all', 'ct', 'all', 'ct', 'eq', 'all', 'ct', 'x1', 'all', 'ct', 'x1'],
    'R10.7: property "a=b" = "c" is not "a" = "b=c"; each message of a batch is matched');

-- a batch's copies keep one record a subscription of what the transaction adds to the
-- counters in shared memory, not one a copy (before: 40,000 records, about 6 MB kept
-- in the backend's top memory context for its life)
SELECT sbq_create_topic('ts_mem');
SELECT count(sbq_create_subscription('ts_mem', 's' || i)) FROM generate_series(1, 20) i;
SELECT total_bytes AS top_before FROM pg_backend_memory_contexts WHERE name = 'TopMemoryContext' \gset
SELECT is((SELECT count(*) FROM sbq_send_batch('ts_mem', (SELECT array_agg('m' || i) FROM generate_series(1, 2000) i))),
    2000::bigint, 'a batch of 2,000 to a topic of 20 subscriptions');
SELECT cmp_ok((SELECT total_bytes FROM pg_backend_memory_contexts WHERE name = 'TopMemoryContext') - :top_before,
    '<', 1048576::bigint, '... grows the backend''s top memory context by less than 1 MB (its 40,000 copies)');

SELECT * FROM finish();
ROLLBACK;
