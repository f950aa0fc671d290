-- sbqueue pgTAP: auto-forwarding (0.10): forward_to on queues and subscriptions.
-- A send to an entity with forward_to stores the message in its destination, a queue or
-- a topic, in the sender's transaction (R10.13, R10.21); the destination must exist and
-- the one who sets forward_to must be allowed to send to it; a receive from the source is
-- SB010 (R10.14); more than four hops dead-letter the message where it is with
-- MaxTransferHopCountExceeded, which also ends cycles (R10.15); a destination deleted
-- since dead-letters it at the source (R10.16, pinned: the source's own dead-letter
-- sub-queue, reason MessagingEntityNotFound); an entity that requires sessions cannot
-- forward, and one may forward into it, a message without session id being
-- dead-lettered at the source (R10.17); the number a send returns is the message's
-- where it lands (R10.20: forwarding keeps the message's sequence number); a scheduled
-- message is forwarded as scheduled and cancelled where it went; a batch forwards what
-- fits; the source's TTL caps; setting forward_to needs manage on both ends, '' stops
-- forwarding; an entity that holds messages cannot start to forward, nor be resubmitted
-- to while it forwards (22023, SB010); a subscription cannot forward to its topic.
-- forward_dead_lettered_messages_to (0.11): maintenance moves the dead letters to the
-- destination as new messages with their reason, description and source (R10.20, K.88);
-- the hops a message made count across its dead-letterings, so that a loop through
-- dead-letter sub-queues ends too (R10.15); one that cannot go is deferred where it is.
BEGIN;
SELECT plan(96);

\ir bad_input_setup.psql

-- the bodies in a queue (main, every state), sorted; and its dead letters' reasons
CREATE FUNCTION pg_temp.bodies(_q text) RETURNS text[] LANGUAGE sql AS $$
    SELECT coalesce(array_agg(convert_from(body, 'UTF8') ORDER BY convert_from(body, 'UTF8') COLLATE "C"), '{}')
      FROM sbq_peek(_q, 1000)
$$;
CREATE FUNCTION pg_temp.dead(_q text) RETURNS text[] LANGUAGE sql AS $$
    SELECT coalesce(array_agg(convert_from(body, 'UTF8') || ': ' || dead_letter_reason
                              ORDER BY sequence_number), '{}')
      FROM sbq_peek(_q || '/$deadletterqueue', 1000)
$$;

-- ============================================================ R10.13, R10.14
SELECT is((SELECT forward_to FROM sbq_create_queue('fw_dest')), NULL, 'a destination queue');
SELECT is((SELECT forward_to FROM sbq_create_queue('fw_src', forward_to => 'FW_DEST')), 'fw_dest',
    'R10.13: forward_to is stored as the destination''s name');
SELECT throws_ok($$SELECT sbq_create_queue('fw_bad', forward_to => 'fw_missing')$$, 'SB001',
    'forward_to: queue or topic "fw_missing" does not exist', 'R10.13: the destination must exist (K.85)');
SELECT lives_ok($$SELECT sbq_send('fw_src', 'one')$$, 'a send to the source');
SELECT is(pg_temp.bodies('fw_src') || pg_temp.bodies('fw_dest'), ARRAY['one'],
    'R10.13: the message is in the destination, not the source (K.84)');
SELECT throws_ok($$SELECT sbq_receive('fw_src')$$, 'SB010',
    'cannot receive from "fw_src", which forwards its messages to "fw_dest"', 'R10.14: a receive from the source is refused (K.84)');
SELECT throws_ok($$SELECT sbq_receive_deferred('fw_src', ARRAY[1::bigint])$$, 'SB010',
    'cannot receive from "fw_src", which forwards its messages to "fw_dest"', 'R10.14: so is a deferred receive');
SELECT is((SELECT sequence_number FROM sbq_peek('fw_dest', 10) WHERE convert_from(body, 'UTF8') = 'two'), NULL::bigint,
    'nothing named two yet');
SELECT is((SELECT sbq_send('fw_src', 'two') = (SELECT sequence_number FROM sbq_peek('fw_dest', 10)
                                                 WHERE convert_from(body, 'UTF8') = 'two')), true,
    'R10.20: the number the send returns is the message''s in the destination');
SAVEPOINT r;
SELECT sbq_send('fw_src', 'rolled back');
ROLLBACK TO SAVEPOINT r;
SELECT is(pg_temp.bodies('fw_dest'), ARRAY['one', 'two'], 'R10.21: a rolled-back send forwarded nothing');

-- ============================================================ R10.15
DO $$ BEGIN
    PERFORM sbq_create_queue('fw_c6');
    PERFORM sbq_create_queue('fw_c' || i, forward_to => 'fw_c' || (i + 1)) FROM generate_series(5, 1, -1) i;
END $$;
SELECT lives_ok($$SELECT sbq_send('fw_c2', 'three hops'), sbq_send('fw_c1', 'five hops')$$, 'sends into a chain of six');
SELECT is(pg_temp.bodies('fw_c6'), ARRAY['three hops'], 'R10.15: four hops reach the end (c2 to c6)');
SELECT is(pg_temp.dead('fw_c5'), ARRAY['five hops: MaxTransferHopCountExceeded'],
    'R10.15: a fifth hop is refused: dead-lettered where it is, MaxTransferHopCountExceeded (K.86)');
DO $$ BEGIN
    PERFORM sbq_create_queue('fw_x1');
    PERFORM sbq_create_queue('fw_x2', forward_to => 'fw_x1');
    PERFORM sbq_update_queue('fw_x1', forward_to => 'fw_x2');
END $$;
SELECT lives_ok($$SELECT sbq_send('fw_x1', 'cycle')$$, 'R10.15: a send into a cycle ends');
SELECT is(pg_temp.dead('fw_x1') || pg_temp.dead('fw_x2'), ARRAY['cycle: MaxTransferHopCountExceeded'],
    'R10.15: ... dead-lettered once, after four hops');

-- ============================================================ topics
DO $$ BEGIN
    PERFORM sbq_create_topic('fw_t');
    PERFORM sbq_create_subscription('fw_t', 'stay');
    PERFORM sbq_create_subscription('fw_t', 'onward', forward_to => 'fw_dest');
    PERFORM sbq_create_queue('fw_to_topic', forward_to => 'fw_t');
END $$;
SELECT lives_ok($$SELECT sbq_send('fw_to_topic', 'fan')$$, 'a send to a queue that forwards to a topic');
SELECT is(pg_temp.bodies('fw_t/subscriptions/stay') || pg_temp.bodies('fw_t/subscriptions/onward'),
    ARRAY['fan'], 'R10.13: the topic fans it out; the subscription that forwards keeps nothing');
SELECT ok('fan' = ANY (pg_temp.bodies('fw_dest')), 'R10.13: ... and its copy is forwarded to the queue');

-- ============================================================ R10.16, R10.17
DO $$ BEGIN
    PERFORM sbq_create_queue('fw_gone');
    PERFORM sbq_create_queue('fw_orphan', forward_to => 'fw_gone');
    PERFORM sbq_delete_queue('fw_gone');
    PERFORM sbq_create_queue('fw_sess', requires_session => true);
    PERFORM sbq_create_queue('fw_to_sess', forward_to => 'fw_sess');
END $$;
SELECT lives_ok($$SELECT sbq_send('fw_orphan', 'lost way')$$, 'a send whose destination was deleted');
SELECT is(pg_temp.dead('fw_orphan'), ARRAY['lost way: MessagingEntityNotFound'],
    'R10.16: the destination deleted, the source dead-letters the message (its own dead-letter sub-queue)');
SELECT throws_ok($$SELECT sbq_create_queue('fw_bad', requires_session => true, forward_to => 'fw_dest')$$, '22023',
    'an entity that requires sessions cannot forward its messages', 'R10.17: a session entity cannot forward (K.90)');
SELECT lives_ok($$SELECT sbq_send('fw_to_sess', 'with', session_id => 'S'), sbq_send('fw_to_sess', 'without')$$,
    'R10.17: sends forwarded into a session queue');
SELECT is(pg_temp.bodies('fw_sess') || pg_temp.dead('fw_to_sess'), ARRAY['with', 'without: Session id is null.'],
    'R10.17: the session id is kept; a message without one is dead-lettered at the source (K.90)');

-- ============================================================ scheduled, starting to forward, rights
SELECT sbq_send('fw_src', 'later', scheduled_enqueue_time => now() + interval '1 hour') AS later \gset
SELECT throws_ok(format('SELECT sbq_cancel_scheduled(%L, %s)', 'fw_src', :later), 'SB010',
    '"fw_src" forwards its messages to "fw_dest": they are scheduled there',
    'a scheduled message is cancelled where it went, not through the source (which would reach any number there)');
SELECT lives_ok(format('SELECT sbq_cancel_scheduled(%L, %s)', 'fw_dest', :later),
    '... where it is cancelled with the number the send returned');
SELECT is(pg_temp.bodies('fw_dest'), ARRAY['fan', 'one', 'two'], '... and is gone from the destination');
DO $$ BEGIN
    PERFORM sbq_create_topic('fw_ta');
    PERFORM sbq_create_topic('fw_tb');
    PERFORM sbq_create_subscription('fw_tb', 'x');
    PERFORM sbq_create_subscription('fw_ta', 'keep');
    PERFORM sbq_create_subscription('fw_ta', 'onward', forward_to => 'fw_tb');
END $$;
SELECT sbq_send('fw_ta', 'sched', scheduled_enqueue_time => now() + interval '1 hour') AS tsched \gset
SELECT lives_ok(format('SELECT sbq_cancel_scheduled(%L, %s)', 'fw_ta', :tsched),
    'cancel on a topic whose subscription forwarded the copy to another topic');
SELECT is(pg_temp.bodies('fw_ta/subscriptions/keep') || pg_temp.bodies('fw_tb/subscriptions/x'), '{}'::text[],
    '... cancels the copies down that topic too');
SELECT throws_ok($$SELECT sbq_create_subscription('fw_ta', 'loop', forward_to => 'FW_TA')$$, '22023',
    'a subscription of topic "fw_ta" cannot forward to it', 'a subscription cannot forward to its own topic');
-- a batch: only the message too large for the destination stays behind
DO $$ BEGIN
    PERFORM sbq_create_queue('fw_small', max_message_size => 100);
    PERFORM sbq_create_queue('fw_to_small', forward_to => 'fw_small', default_message_ttl => '1 minute');
END $$;
SELECT lives_ok($$SELECT sbq_send_batch('fw_to_small', ARRAY['small', repeat('x', 200)])$$, 'a batch, one message too large for the destination');
SELECT is(pg_temp.bodies('fw_small') || pg_temp.dead('fw_to_small'),
    ARRAY['small', repeat('x', 200) || ': MessageSizeExceededException'],
    'R10.16: the other is forwarded; the large one is dead-lettered at the source');
SELECT ok((SELECT expires_at <= enqueued_time + interval '1 minute' FROM sbq_peek('fw_small', 10)),
    'the source''s default time to live caps what it forwards, as a send to it would');
SELECT throws_ok($$SELECT sbq_resubmit('fw_to_small', NULL)$$, 'SB010',
    'cannot resubmit to "fw_to_small", which forwards its messages to "fw_small"',
    'a resubmit into a forwarding entity is refused: nobody could receive what it puts back');
SELECT is((SELECT forward_to FROM sbq_update_queue('fw_to_small', forward_to => '')), NULL,
    'forward_to => '''' stops forwarding (NULL leaves it as it is)');
SELECT is(sbq_resubmit('fw_to_small', NULL), 1, '... and then the dead letter can be resubmitted and received');
SELECT sbq_create_queue('fw_full') IS NOT NULL AS made \gset
SELECT sbq_send('fw_full', 'stays') IS NOT NULL AS sent \gset
SELECT throws_ok($$SELECT sbq_update_queue('fw_full', forward_to => 'fw_dest')$$, '22023',
    '"fw_full" holds messages and cannot start to forward', 'an entity that holds messages cannot start to forward');
CREATE ROLE fw_owner;
DO $$ BEGIN
    PERFORM sbq_create_queue('fw_mine');
    PERFORM sbq_grant('fw_mine', 'fw_owner', ARRAY['manage']);
END $$;
SET LOCAL ROLE fw_owner;
SELECT throws_ok($$SELECT sbq_update_queue('fw_mine', forward_to => 'fw_dest')$$, '42501',
    'permission denied for queue "fw_dest"',
    'setting forward_to needs manage on the destination too: no way around a queue''s rights');
RESET ROLE;
SELECT sbq_grant('fw_dest', 'fw_owner', ARRAY['send']) IS NULL AS granted \gset
SET LOCAL ROLE fw_owner;
SELECT throws_ok($$SELECT sbq_update_queue('fw_mine', forward_to => 'fw_dest')$$, '42501',
    'permission denied for queue "fw_dest"',
    'send on the destination is not enough: one who could then grant send on the source to anyone');
RESET ROLE;
SELECT sbq_grant('fw_dest', 'fw_owner', ARRAY['manage']) IS NULL AS granted \gset
SET LOCAL ROLE fw_owner;
SELECT lives_ok($$SELECT sbq_update_queue('fw_mine', forward_to => 'fw_dest')$$, 'manage on both ends sets it up');
RESET ROLE;
SELECT sbq_revoke('fw_dest', 'fw_owner', ARRAY['manage', 'send']) IS NULL AS revoked \gset
SET LOCAL ROLE fw_owner;
SELECT lives_ok($$SELECT sbq_update_queue('fw_mine', lock_duration => '1 minute')$$,
    'a manager of the source changes its other properties without a right on the destination');
RESET ROLE;

-- ============================================================ dead letters (0.11)
-- the dead letters' bodies, states and reasons; and a pass's counts of forwarded / kept
CREATE FUNCTION pg_temp.dlq(_q text) RETURNS text[] LANGUAGE sql AS $$
    SELECT coalesce(array_agg(convert_from(body, 'UTF8') || ' ' || state || ': ' || dead_letter_reason
                              ORDER BY sequence_number), '{}')
      FROM sbq_peek(_q || '/$deadletterqueue', 1000)
$$;
CREATE FUNCTION pg_temp.pass() RETURNS text LANGUAGE sql AS $$
    SELECT m->>'dead_letters_forwarded' || '/' || (m->>'dead_letters_not_forwarded')
      FROM sbq_maintain() m
$$;
-- receive every message of a queue and dead-letter it with a reason
CREATE FUNCTION pg_temp.kill(_q text, _reason text DEFAULT 'Bad') RETURNS integer LANGUAGE sql AS $$
    SELECT count(sbq_deadletter(_q, lock_token, _reason, 'why: ' || _reason))::integer FROM sbq_receive(_q, 100)
$$;
SELECT is((SELECT forward_dead_lettered_messages_to FROM sbq_create_queue('dl_dest')), NULL, 'a destination for dead letters');
SELECT is((SELECT forward_dead_lettered_messages_to
             FROM sbq_create_queue('dl_src', forward_dead_lettered_messages_to => 'DL_DEST')), 'dl_dest',
    'forward_dead_lettered_messages_to is stored as the destination''s name (it was 0A000 before 0.11)');
SELECT throws_ok($$SELECT sbq_create_queue('dl_bad', forward_dead_lettered_messages_to => 'dl_missing')$$, 'SB001',
    'forward_dead_lettered_messages_to: queue or topic "dl_missing" does not exist', 'R10.13: its destination must exist');
SELECT throws_ok($$SELECT sbq_create_queue('dl_self', forward_dead_lettered_messages_to => 'DL_SELF')$$, '22023',
    '"DL_SELF" cannot forward its messages to itself', '... and not be the entity itself');
SELECT throws_ok($$SELECT sbq_create_queue('dl_bad', forward_dead_lettered_messages_to => 'fw_t/subscriptions/stay')$$, '22023',
    'forward_dead_lettered_messages_to "fw_t/subscriptions/stay" names a subscription', '... nor a subscription');
SELECT throws_ok($$SELECT sbq_create_subscription('fw_t', 'dl_loop', forward_dead_lettered_messages_to => 'fw_t')$$, '22023',
    'a subscription of topic "fw_t" cannot forward to it', '... nor, for a subscription, its own topic');
SELECT sbq_send('dl_src', 'first', message_id => 'dm1', subject => 'sub', correlation_id => 'c',
                application_properties => '{"k": 1}') AS dl_first \gset
SELECT is(pg_temp.kill('dl_src'), 1, 'a message dead-lettered in the source');
SELECT throws_ok($$SELECT sbq_receive('dl_src/$deadletterqueue')$$, 'SB010',
    'cannot receive from the dead-letter sub-queue of "dl_src", which forwards its dead letters to "dl_dest"',
    'R10.14: its dead-letter sub-queue has no receivers');
SELECT is(pg_temp.dlq('dl_src'), ARRAY['first active: Bad'], '... sbq_peek shows it until maintenance moves it');
SELECT is(pg_temp.pass(), '1/0', 'a maintenance pass forwards it');
SELECT is(pg_temp.dlq('dl_src') || pg_temp.bodies('dl_dest'), ARRAY['first'],
    'R10.20: it left the dead-letter sub-queue for the destination (K.88)');
SELECT results_eq(
    $$SELECT message_id, subject, correlation_id, application_properties, state, delivery_count,
             dead_letter_reason, dead_letter_error_description, dead_letter_source
        FROM sbq_peek('dl_dest')$$,
    $$VALUES ('dm1', 'sub', 'c', '{"k": 1}'::jsonb, 'active', 0, 'Bad', 'why: Bad', 'dl_src')$$,
    'R10.20: an active message with its properties, and its dead-letter reason, description and source (K.88)');
SELECT ok((SELECT sequence_number > :dl_first FROM sbq_peek('dl_dest')),
    'it arrives under a new sequence number, as a resubmitted message does');
SELECT is((SELECT count(*)::int FROM sbq_receive('dl_dest')), 1, 'and is received there');
SELECT is((SELECT forward_dead_lettered_messages_to FROM sbq_update_queue('dl_src', forward_dead_lettered_messages_to => '')),
    NULL, 'forward_dead_lettered_messages_to => '''' stops forwarding dead letters');
SELECT is(pg_temp.kill('dl_src') + (SELECT pg_temp.kill('dl_src') FROM (SELECT sbq_send('dl_src', 'stays')) s), 1,
    'another dead letter');
SELECT is(pg_temp.pass() || ' ' || (SELECT count(*) FROM sbq_receive('dl_src/$deadletterqueue')), '0/0 1',
    '... stays, and is received from the dead-letter sub-queue again');

-- locks: a dead letter under a valid lock stays until the lock is gone
SELECT sbq_send('dl_src', 'locked') IS NOT NULL AS sent \gset
SELECT pg_temp.kill('dl_src') AS killed \gset
SELECT lock_token AS dl_token FROM sbq_receive('dl_src/$deadletterqueue') \gset
SELECT lives_ok($$SELECT sbq_update_queue('dl_src', forward_dead_lettered_messages_to => 'dl_dest')$$,
    'forwarding set up again, a dead letter locked by a receiver');
SELECT is(pg_temp.pass(), '0/0', 'a dead letter under a valid lock is not forwarded');
SELECT lives_ok(format('SELECT sbq_abandon(%L, %L::uuid)', 'dl_src/$deadletterqueue', :'dl_token'),
    'its holder abandons it');
SELECT is(pg_temp.pass(), '1/0', '... and the next pass forwards it');

-- R10.15: the hops count across dead-letterings: a loop through dead-letter sub-queues ends
DO $$ BEGIN
    PERFORM sbq_create_queue('dl_a');
    PERFORM sbq_create_queue('dl_b', forward_dead_lettered_messages_to => 'dl_a');
    PERFORM sbq_update_queue('dl_a', forward_dead_lettered_messages_to => 'dl_b');
    PERFORM sbq_send('dl_a', 'loop');
END $$;
SELECT is(pg_temp.kill('dl_a', 'r1') || pg_temp.pass() || pg_temp.kill('dl_b', 'r2') || pg_temp.pass()
          || pg_temp.kill('dl_a', 'r3') || pg_temp.pass() || pg_temp.kill('dl_b', 'r4') || pg_temp.pass(),
          '11/011/011/011/0', 'R10.15: four dead-letterings, each forwarded to the other queue: four hops');
SELECT is(pg_temp.kill('dl_a', 'r5') || ' ' || pg_temp.pass(), '1 0/1',
    'R10.15: the fifth is not forwarded ...');
SELECT is(pg_temp.dlq('dl_a') || pg_temp.bodies('dl_b'), ARRAY['loop deferred: r5'],
    '... but deferred in the dead-letter sub-queue, its reason kept');
SELECT is(pg_temp.pass(), '0/0', '... where the next pass leaves it');
DO $$ BEGIN
    PERFORM sbq_create_queue('dl_c3');
    PERFORM sbq_create_queue('dl_c2', forward_to => 'dl_c3');
    PERFORM sbq_create_queue('dl_c1', forward_to => 'dl_c2');
    PERFORM sbq_create_queue('dl_c5');
    PERFORM sbq_create_queue('dl_c4', forward_to => 'dl_c5');
    PERFORM sbq_update_queue('dl_c3', forward_dead_lettered_messages_to => 'dl_c4');
    PERFORM sbq_send('dl_c1', 'chain');
END $$;
SELECT is(pg_temp.kill('dl_c3') || ' ' || pg_temp.pass() || ' ' || pg_temp.bodies('dl_c5')::text, '1 1/0 {chain}',
    'R10.15: forward_to twice, forwarded out of a dead-letter sub-queue, forward_to again: four hops');
SELECT lives_ok($$SELECT sbq_update_queue('dl_c5', forward_dead_lettered_messages_to => 'dl_dest')$$,
    'the end of that chain forwards its dead letters');
SELECT is(pg_temp.kill('dl_c5') || ' ' || pg_temp.pass() || ' ' || pg_temp.dlq('dl_c5')::text, '1 0/1 {"chain deferred: Bad"}',
    'R10.15: a fifth hop is refused, whichever way the message went before');

-- what cannot go is deferred where it is; a destination that is gone is waited for
DO $$ BEGIN
    PERFORM sbq_create_queue('dl_sess', requires_session => true);
    PERFORM sbq_create_queue('dl_to_sess', forward_dead_lettered_messages_to => 'dl_sess');
    PERFORM sbq_send('dl_to_sess', 'with', session_id => 'S');
    PERFORM sbq_send('dl_to_sess', 'without');
    PERFORM sbq_create_queue('dl_small', max_message_size => 100);
    PERFORM sbq_create_queue('dl_to_small', forward_dead_lettered_messages_to => 'dl_small');
    PERFORM sbq_send('dl_to_small', 'small');
    PERFORM sbq_send('dl_to_small', repeat('x', 200));
END $$;
SELECT is(pg_temp.kill('dl_to_sess') + pg_temp.kill('dl_to_small'), 4, 'dead letters with and without a session id, small and large');
SELECT is(pg_temp.pass(), '2/2', 'a pass forwards two and defers two');
SELECT is(pg_temp.bodies('dl_sess') || pg_temp.dlq('dl_to_sess'), ARRAY['with', 'without deferred: Bad'],
    'R10.17: a session destination gets the one with a session id; the other is deferred in the dead-letter sub-queue');
SELECT is(pg_temp.bodies('dl_small') || pg_temp.dlq('dl_to_small'), ARRAY['small', repeat('x', 200) || ' deferred: Bad'],
    'a message too large for the destination is deferred where it is');
SELECT is((SELECT sbq_resubmit('dl_to_small', NULL)), 1, 'sbq_resubmit moves a deferred dead letter back to its queue');
DO $$ BEGIN
    PERFORM sbq_create_queue('dl_gone');
    PERFORM sbq_create_queue('dl_to_gone', forward_dead_lettered_messages_to => 'dl_gone');
    PERFORM sbq_send('dl_to_gone', 'waits');
    PERFORM sbq_delete_queue('dl_gone');
END $$;
SELECT is(pg_temp.kill('dl_to_gone') || ' ' || pg_temp.pass() || ' ' || pg_temp.dlq('dl_to_gone')::text,
    '1 0/0 {"waits active: Bad"}', 'R10.16: while the destination does not exist, the dead letters wait for it');
SELECT lives_ok($$SELECT sbq_create_queue('DL_GONE')$$, 'it is created again');
SELECT is(pg_temp.pass() || ' ' || pg_temp.bodies('dl_gone')::text, '1/0 {waits}', '... and they go there');

-- to a topic: every matching subscription gets a copy with the dead letter's source
DO $$ BEGIN
    PERFORM sbq_create_topic('dl_t');
    PERFORM sbq_create_subscription('dl_t', 'one');
    PERFORM sbq_create_subscription('dl_t', 'two');
    PERFORM sbq_create_subscription('dl_t', 'src', forward_dead_lettered_messages_to => 'dl_dest');
    PERFORM sbq_create_queue('dl_to_t', forward_dead_lettered_messages_to => 'dl_t');
    PERFORM sbq_send('dl_to_t', 'fan');
END $$;
SELECT is(pg_temp.kill('dl_to_t') || ' ' || pg_temp.pass(), '1 1/0', 'a dead letter forwarded to a topic');
SELECT is((SELECT array_agg(convert_from(body, 'UTF8') || ' from ' || dead_letter_source)
             FROM (SELECT * FROM sbq_peek('dl_t/subscriptions/one') UNION ALL SELECT * FROM sbq_peek('dl_t/subscriptions/two')) c),
    ARRAY['fan from dl_to_t', 'fan from dl_to_t'], 'R10.20: each subscription''s copy carries the dead letter''s source');
SELECT is(pg_temp.kill('dl_t/subscriptions/src') || ' ' || pg_temp.pass() || ' '
          || (SELECT string_agg(dead_letter_source, ',') FROM sbq_peek('dl_dest', 10) WHERE convert_from(body, 'UTF8') = 'fan'),
    '1 1/0 dl_t/subscriptions/src', 'a subscription forwards its dead letters too');

-- the source of a dead letter that a filter error or a refused forward made: where it is
DO $$ BEGIN
    PERFORM sbq_create_topic('dl_ft');
    PERFORM sbq_create_subscription('dl_ft', 's', forward_dead_lettered_messages_to => 'dl_dest');
    PERFORM sbq_remove_rule('dl_ft', 's', '$Default');
    PERFORM sbq_add_rule('dl_ft', 's', 'bad', sql_filter => '1/x = 1');
    PERFORM sbq_send('dl_ft', 'filter error', application_properties => '{"x": 0}');
    PERFORM sbq_create_queue('dl_nosess', forward_to => 'dl_sess', forward_dead_lettered_messages_to => 'dl_dest');
    PERFORM sbq_send('dl_nosess', 'no session id');
END $$;
SELECT is(pg_temp.pass(), '2/0', 'a filter error''s dead letter and a refused forward''s are forwarded');
SELECT is((SELECT array_agg(convert_from(body, 'UTF8') || ' from ' || dead_letter_source ORDER BY sequence_number)
             FROM sbq_peek('dl_dest', 100) WHERE convert_from(body, 'UTF8') IN ('filter error', 'no session id')),
    ARRAY['filter error from dl_ft/subscriptions/s', 'no session id from dl_nosess'],
    'R10.20: each with the entity it was dead-lettered in as its source');
SELECT sbq_create_queue('dl_fs', max_message_size => 100) IS NULL AS made \gset
SELECT sbq_create_queue('dl_to_fs', forward_to => 'dl_fs') IS NULL AS made \gset
SELECT count(*) AS sent FROM sbq_send_batch('dl_to_fs', ARRAY['small', repeat('x', 200)]) \gset
SELECT is((SELECT string_agg(d.dead_letter_reason || ' ' || coalesce(transfer_hops::text, 'none'), ',')
             FROM sbq.dead_letters d JOIN sbq.queues q USING (queue_id) WHERE q.name = 'dl_to_fs'),
    'MessageSizeExceededException none',
    'R10.15: a message too large for its forward_to destination counts no hop where it stays');

-- what would be stored nowhere stays: a duplicate in the destination's window, a topic that takes nothing
DO $$ BEGIN
    PERFORM sbq_create_queue('dl_failed', duplicate_detection_window => '10 minutes');
    PERFORM sbq_create_queue('dl_orders', forward_dead_lettered_messages_to => 'dl_failed');
    PERFORM sbq_send('dl_orders', 'order 42', message_id => 'order-42');
END $$;
-- the passes below log a WARNING for each dead letter they defer: expected here
SET LOCAL client_min_messages = error;
SELECT is(pg_temp.kill('dl_orders') || ' ' || pg_temp.pass() || ' ' || (SELECT count(sbq_complete('dl_failed', lock_token)) FROM sbq_receive('dl_failed')),
    '1 1/0 1', 'a dead letter forwarded to a queue with duplicate detection, and completed there');
SELECT is((SELECT sbq_send('dl_orders', 'order 42', message_id => 'order-42') > 0) || ' ' || pg_temp.kill('dl_orders') || ' ' || pg_temp.pass(),
    'true 1 0/1', 'the same message id dead-lettered again: the destination would store nothing ...');
SELECT is(pg_temp.dlq('dl_orders'), ARRAY['order 42 deferred: Bad'],
    '... so it stays, deferred in the dead-letter sub-queue: never lost');
DO $$ BEGIN
    PERFORM sbq_create_topic('dl_picky');
    PERFORM sbq_create_subscription('dl_picky', 'only_x');
    PERFORM sbq_remove_rule('dl_picky', 'only_x', '$Default');
    PERFORM sbq_add_rule('dl_picky', 'only_x', 'x', correlation_filter => '{"subject": "x"}');
    PERFORM sbq_create_queue('dl_to_picky', forward_dead_lettered_messages_to => 'dl_picky');
    PERFORM sbq_send('dl_to_picky', 'not x');
END $$;
SELECT is(pg_temp.kill('dl_to_picky') || ' ' || pg_temp.pass() || ' ' || pg_temp.dlq('dl_to_picky')::text,
    '1 0/1 {"not x deferred: Bad"}', 'a dead letter no subscription of the destination topic takes stays, deferred');
RESET client_min_messages;
-- such a dead letter is deferred as the others that cannot go are, at LOG: it is no
-- failure, of which a pass takes at most 32 (it raised a WARNING for each, and four
-- passes deferred 40)
SET LOCAL client_min_messages = warning;
SELECT count(*) AS sent FROM sbq_send_batch('dl_to_picky', array_fill('not x'::text, ARRAY[40])) \gset
SELECT is(pg_temp.kill('dl_to_picky') || ' ' || pg_temp.pass(),
    '40 0/40', 'forty that no subscription takes: one pass defers them all, without a warning');
RESET client_min_messages;

-- a forward that fails with an error: the others go on in the same pass, the failing one is deferred
CREATE FUNCTION pg_temp.poison() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF convert_from(NEW.body, 'UTF8') = 'poison' THEN RAISE 'poisoned'; END IF;
    RETURN NEW;
END $$;
DO $$ BEGIN
    PERFORM sbq_create_queue('dl_p_dest');
    PERFORM sbq_create_queue('dl_p', forward_dead_lettered_messages_to => 'dl_p_dest');
    PERFORM sbq_send('dl_p', CASE i WHEN 35 THEN 'poison' ELSE 'p' || i END) FROM generate_series(1, 40) i;
END $$;
SELECT is(pg_temp.kill('dl_p'), 40, 'forty dead letters, the 35th of which fails to arrive');
CREATE TRIGGER poison BEFORE INSERT ON sbq.messages FOR EACH ROW EXECUTE FUNCTION pg_temp.poison();
SET LOCAL client_min_messages = error;
SELECT is(pg_temp.pass(), '39/1', 'one pass forwards the 39 others and defers the failing one');
RESET client_min_messages;
DROP TRIGGER poison ON sbq.messages;
SELECT is((SELECT count(DISTINCT body) || '/' || count(*) FROM sbq_peek('dl_p_dest', 100)) || ' ' || pg_temp.dlq('dl_p')::text,
    '39/39 {"poison deferred: Bad"}', '... each once');

-- an error that ends the pass (a lock timeout, a cancel) in a forward: the pass fails with
-- it, its forwarding subtransaction ended first, and the caller's block goes on
CREATE FUNCTION pg_temp.stall() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF convert_from(NEW.body, 'UTF8') = 'stall' THEN
        RAISE 'stalled' USING ERRCODE = 'lock_not_available';
    END IF;
    RETURN NEW;
END $$;
DO $$ BEGIN
    PERFORM sbq_create_queue('dl_s_dest');
    PERFORM sbq_create_queue('dl_s', forward_dead_lettered_messages_to => 'dl_s_dest');
    PERFORM sbq_send('dl_s', 'stall');
END $$;
SELECT is(pg_temp.kill('dl_s'), 1, 'a dead letter whose forward will stall');
CREATE TRIGGER stall BEFORE INSERT ON sbq.messages FOR EACH ROW EXECUTE FUNCTION pg_temp.stall();
SELECT current_setting('search_path') AS fw_path \gset
SELECT throws_ok($$SELECT sbq_maintain()$$, '55P03', 'stalled', 'a lock timeout in a forward ends the pass with it');
SELECT is(current_setting('search_path'), :'fw_path',
    '... and the block that caught it goes on with its own settings, not the pass''s');
SELECT is((SELECT count(*) FROM sbq_peek('dl_s/$deadletterqueue', 10)) || ' ' || (SELECT count(*) FROM sbq_peek('dl_s_dest', 10)),
    '1 0', '... the dead letter where it was');
DROP TRIGGER stall ON sbq.messages;
SELECT is(pg_temp.pass(), '1/0', '... and the next pass forwards it');

-- rights: manage on both ends
SET LOCAL ROLE fw_owner;
SELECT throws_ok($$SELECT sbq_update_queue('fw_mine', forward_dead_lettered_messages_to => 'dl_dest')$$, '42501',
    'permission denied for queue "dl_dest"', 'forward_dead_lettered_messages_to needs manage on the destination too');
RESET ROLE;

SELECT * FROM finish();
ROLLBACK;
