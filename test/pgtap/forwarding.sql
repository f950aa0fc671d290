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
BEGIN;
SELECT plan(40);

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

SELECT * FROM finish();
ROLLBACK;
