-- sbqueue pgTAP: sessions, one group of tests per rule R9.1-R9.10, then bad input.
-- Sleeps: 0.3 s + 1.1 s + 5.2 s. Lock checks use the wall clock, so session locks
-- expire inside this transaction.
BEGIN;
SELECT plan(69);

DO $$ BEGIN
    PERFORM sbq_create_queue('s9', lock_duration => '5 seconds', requires_session => true);
    PERFORM sbq_create_queue('s9_max2', lock_duration => '5 seconds', max_delivery_count => 2,
                             requires_session => true);
    PERFORM sbq_create_queue('s9_ttl', requires_session => true,
                             dead_lettering_on_message_expiration => true);
    PERFORM sbq_create_queue('s9_small', requires_session => true, max_message_size => 16);
    PERFORM sbq_create_queue('s9_plain');
    PERFORM sbq_create_queue('s9_sched', requires_session => true);
    PERFORM sbq_send('s9_sched', 'later', session_id => 'sch',
                     scheduled_enqueue_time => clock_timestamp() + interval '1 second');
    PERFORM sbq_create_queue('s9_purge', requires_session => true);
    -- t1 expires during the sleeps below
    PERFORM sbq_send('s9_ttl', 't1', session_id => 't', message_id => 't1', time_to_live => '1 second');
    PERFORM sbq_send('s9_ttl', 't2', session_id => 't', message_id => 't2');
END $$;
CREATE TEMP TABLE tok (name text PRIMARY KEY, token uuid);
CREATE TEMP TABLE msg (name text PRIMARY KEY, lock_token uuid, seq bigint, dc int);

-- R9.1: set at creation only
SELECT is((SELECT requires_session FROM sbq_get_queue('s9')), true,
    'R9.1: a queue created with requires_session requires sessions');
SELECT throws_ok($$SELECT sbq_update_queue('s9', requires_session => false)$$, '22023', NULL,
    'R9.1: requires_session cannot be turned off after creation');
SELECT throws_ok($$SELECT sbq_update_queue('s9_plain', requires_session => true)$$, '22023', NULL,
    'R9.1: requires_session cannot be turned on after creation');

-- R9.2: a message needs a session id; sessionless receives are refused; peek works
SELECT throws_ok($$SELECT sbq_send('s9', 'x')$$, '22023',
    'the SessionId was not set on a message, and it cannot be sent to queue "s9"',
    'R9.2: a send without session_id fails with Service Bus''s wording');
SELECT throws_ok($$SELECT sbq_send('s9', 'x', session_id => '')$$, '22023', NULL,
    'R9.2: an empty session_id is not a valid value');
SELECT throws_ok($$SELECT sbq_send_batch('s9', ARRAY['x', 'y'])$$, '22023', NULL,
    'R9.2: a batch without session_id fails too');
SELECT is((SELECT count(*) FROM sbq_peek('s9', 10)), 0::bigint,
    'R9.2: the refused sends stored nothing');
DO $$ BEGIN
    PERFORM sbq_send('s9', 'o1', session_id => 'order-2', message_id => 'o1');
    PERFORM sbq_send('s9', 'p1', session_id => 'order-1', message_id => 'p1');
    PERFORM sbq_send('s9', 'p2', session_id => 'order-1', message_id => 'p2');
    PERFORM sbq_send('s9', 'p3', session_id => 'order-1', message_id => 'p3');
    PERFORM sbq_send('s9', 'o2', session_id => 'order-2', message_id => 'o2');
END $$;
SELECT throws_ok($$SELECT * FROM sbq_receive('s9')$$, 'SB010', 'queue "s9" requires sessions',
    'R9.2: a sessionless peek-lock receive on a session queue fails with SB010');
SELECT throws_ok($$SELECT * FROM sbq_receive('s9', 1, '0', 'receive_and_delete')$$, 'SB010', NULL,
    'R9.2: a sessionless receive-and-delete on a session queue fails with SB010');
SELECT throws_ok($$SELECT * FROM sbq_receive_deferred('s9', ARRAY[1::bigint])$$, 'SB010', NULL,
    'R9.2: a sessionless receive of deferred messages fails with SB010');
SELECT is((SELECT array_agg(session_id ORDER BY sequence_number) FROM sbq_peek('s9', 10)),
    ARRAY['order-2', 'order-1', 'order-1', 'order-1', 'order-2'],
    'R9.2: peek works on a session queue and shows session_id');
SELECT throws_ok($$SELECT * FROM sbq_accept_session('s9_plain')$$, 'SB010', NULL,
    'R9.2: accepting a session on a queue without sessions fails with SB010');

-- R9.3: a session exists while it has messages
SELECT is((SELECT array_agg(session_id || ':' || available_count ORDER BY session_id)
             FROM sbq_list_sessions('s9')),
    ARRAY['order-1:3', 'order-2:2'],
    'R9.3: list_sessions shows each session with messages and its available count');

-- R9.4: accept-next takes the session whose oldest available message is oldest
INSERT INTO tok SELECT 'a', session_token FROM sbq_accept_session('s9');
SELECT is((SELECT session_id FROM sbq_accept_session('s9', 'order-3')), 'order-3',
    'R9.4: a named session with no messages can be accepted (request/response)');
SELECT is((SELECT count(*) FROM sbq_list_sessions('s9') WHERE session_id = 'order-3'
             AND locked_until IS NOT NULL), 1::bigint,
    'R9.4: the accepted empty session is listed as held');
INSERT INTO tok SELECT 'b', session_token FROM sbq_accept_session('s9');
SELECT is((SELECT session_id FROM sbq_list_sessions('s9') l
             WHERE l.locked_until IS NOT NULL AND l.session_id <> 'order-3'
             ORDER BY session_id LIMIT 1), 'order-1',
    'R9.4: accept-next took order-1 after order-2');
SELECT is((SELECT count(*) FROM sbq_accept_session('s9')), 0::bigint,
    'R9.4: with every session held, accept-next returns no row');
CREATE TEMP TABLE waited AS SELECT clock_timestamp() AS t0,
    (SELECT count(*) FROM sbq_accept_session('s9', NULL, '0.3 seconds')) AS n,
    clock_timestamp() AS t1;
SELECT ok((SELECT n = 0 AND t1 - t0 >= interval '0.29 seconds' FROM waited),
    'R9.4: accept-next waits up to max_wait, then returns no row');

-- R9.5: exclusive
SELECT throws_ok($$SELECT * FROM sbq_accept_session('s9', 'order-1')$$, 'SB005',
    'session "order-1" of queue "s9" cannot be locked',
    'R9.5, R9.7: accepting a held session fails with SB005 (SessionCannotBeLocked)');

-- R9.6: session lock duration is the queue's lock_duration; renew returns the new expiry
SELECT ok((SELECT locked_until BETWEEN clock_timestamp() + interval '3.5 seconds'
                                   AND clock_timestamp() + interval '5.5 seconds'
             FROM sbq_list_sessions('s9') WHERE session_id = 'order-2'),
    'R9.6: the session lock lasts lock_duration');
DO $$ BEGIN PERFORM pg_sleep(1.1); END $$;
CREATE TEMP TABLE rn AS SELECT sbq_renew_session('s9', (SELECT token FROM tok WHERE name = 'a')) AS until,
    clock_timestamp() AS at;
SELECT ok((SELECT until BETWEEN at + interval '4.5 seconds' AND at + interval '5.5 seconds' FROM rn),
    'R9.6: renew_session returns now + lock_duration');

-- R9.8: in order, several locked at once; an abandoned message is served again next
INSERT INTO msg SELECT message_id, lock_token, sequence_number, delivery_count
  FROM sbq_receive_session('s9', (SELECT token FROM tok WHERE name = 'b'), 2);
SELECT is((SELECT array_agg(name ORDER BY seq) FROM msg), ARRAY['p1', 'p2'],
    'R9.8: the session''s messages come in sequence order, two locked at once');
SELECT is((SELECT count(*) FROM sbq_peek('s9', 10) p JOIN msg m ON m.seq = p.sequence_number
             WHERE p.lock_token IS NULL), 2::bigint,
    'R9.8: peek shows no lock token for the locked messages');
SELECT is((SELECT array_agg(p.locked_until = l.locked_until) FROM sbq_peek('s9', 10) p
             JOIN msg m ON m.seq = p.sequence_number
             CROSS JOIN (SELECT locked_until FROM sbq_list_sessions('s9') WHERE session_id = 'order-1') l),
    ARRAY[true, true], 'R9.5: peek shows a message locked in a session with its session''s locked_until');
SELECT is((SELECT locked_count FROM sbq_queue_stats WHERE queue = 's9'), 2::bigint,
    'R9.5: sbq_queue_stats counts the messages locked in a session as locked');
DO $$ BEGIN PERFORM sbq_abandon('s9', (SELECT lock_token FROM msg WHERE name = 'p1')); END $$;
SELECT is((SELECT array_agg(message_id || ':' || delivery_count ORDER BY sequence_number)
             FROM sbq_receive_session('s9', (SELECT token FROM tok WHERE name = 'b'), 5)),
    ARRAY['p1:2', 'p3:1'],
    'R9.8: the abandoned message is the next one served again, then the rest');
SELECT throws_ok($$SELECT sbq_renew('s9', (SELECT lock_token FROM msg WHERE name = 'p2'))$$,
    'SB010', NULL, 'R9.5: a message lock of a session is not renewed on its own (renew the session)');
SELECT lives_ok($$SELECT sbq_complete('s9', (SELECT lock_token FROM msg WHERE name = 'p2'))$$,
    'R9.5: a message lock under a valid session lock settles');

-- R9.5: deferred messages of a session: by sequence number, for the holder only
INSERT INTO msg SELECT 'o1', lock_token, sequence_number, delivery_count
  FROM sbq_receive_session('s9', (SELECT token FROM tok WHERE name = 'a'));
DO $$ BEGIN PERFORM sbq_defer('s9', (SELECT lock_token FROM msg WHERE name = 'o1')); END $$;
SELECT is((SELECT message_id FROM sbq_receive_session('s9', (SELECT token FROM tok WHERE name = 'a'))),
    'o2', 'R9.8: a deferred message is skipped by the session''s receive');
SELECT throws_ok(format($$SELECT * FROM sbq_receive_deferred('s9', ARRAY[%s::bigint], %L)$$,
        (SELECT seq FROM msg WHERE name = 'o1'), (SELECT token FROM tok WHERE name = 'b')),
    'SB003', NULL, 'R9.5: another session''s holder cannot receive the deferred message (SB003)');
SELECT throws_like(format($$SELECT * FROM sbq_receive_deferred('s9', ARRAY[%s::bigint], %L)$$,
        (SELECT seq FROM msg WHERE name = 'o1'), (SELECT token FROM tok WHERE name = 'b')),
    format('deferred message %s not found in session %%', (SELECT seq FROM msg WHERE name = 'o1')),
    'R9.5: ... and the error names that message');
SELECT is((SELECT message_id || ':' || state FROM sbq_receive_deferred('s9',
        ARRAY[(SELECT seq FROM msg WHERE name = 'o1')], (SELECT token FROM tok WHERE name = 'a'))),
    'o1:deferred', 'R9.5: the holder receives its deferred message by sequence number');

-- R9.10: state
SELECT is(sbq_get_session_state('s9', (SELECT token FROM tok WHERE name = 'a')), NULL::bytea,
    'R9.10: a session without state has NULL state');
SELECT lives_ok($$SELECT sbq_set_session_state('s9', (SELECT token FROM tok WHERE name = 'a'), '\x0a0b')$$,
    'R9.10: the holder sets the state');
SELECT is(sbq_get_session_state('s9', (SELECT token FROM tok WHERE name = 'a')), '\x0a0b'::bytea,
    'R9.10: get returns the state set');
SELECT is((SELECT has_state FROM sbq_list_sessions('s9') WHERE session_id = 'order-2'), true,
    'R9.10: list_sessions says the session has state');

-- R9.9: release does not count a delivery
SELECT lives_ok($$SELECT sbq_release_session('s9', (SELECT token FROM tok WHERE name = 'a'))$$,
    'R9.9: release with two unsettled messages');
SELECT throws_ok($$SELECT sbq_complete('s9', (SELECT lock_token FROM msg WHERE name = 'o1'))$$,
    'SB002', NULL, 'R9.5: a message lock is lost with its released session (SB002)');
SELECT throws_ok($$SELECT * FROM sbq_receive_session('s9', (SELECT token FROM tok WHERE name = 'a'))$$,
    'SB004', NULL, 'R9.7: a released session token is lost (SB004)');
SELECT throws_ok($$SELECT sbq_get_session_state('s9', (SELECT token FROM tok WHERE name = 'a'))$$,
    'SB004', NULL, 'R9.7: state calls need a held session (SB004)');
DELETE FROM tok WHERE name = 'a';
INSERT INTO tok SELECT 'a', session_token FROM sbq_accept_session('s9', 'order-2');
SELECT is(sbq_get_session_state('s9', (SELECT token FROM tok WHERE name = 'a')), '\x0a0b'::bytea,
    'R9.10: the state outlives the session lock');
SELECT is((SELECT array_agg(message_id || ':' || delivery_count ORDER BY sequence_number)
             FROM sbq_receive_session('s9', (SELECT token FROM tok WHERE name = 'a'), 5)),
    ARRAY['o2:1'], 'R9.9: after a release the next delivery has the same count as before');

-- R9.10: set NULL clears; over the size limit is SB007 and changes nothing
SELECT throws_ok($$SELECT sbq_set_session_state('s9_small',
        (SELECT session_token FROM sbq_accept_session('s9_small', 'big')), decode(repeat('00', 17), 'hex'))$$,
    'SB007', NULL, 'R9.10: a state larger than max_message_size fails with SB007');
SELECT lives_ok($$SELECT sbq_set_session_state('s9', (SELECT token FROM tok WHERE name = 'a'), NULL)$$,
    'R9.10: set_state(NULL) clears the state');
SELECT is(sbq_get_session_state('s9', (SELECT token FROM tok WHERE name = 'a')), NULL::bytea,
    'R9.10: after set_state(NULL) get returns NULL');

-- R9.9 and max delivery count: session lock expiry counts each locked message
DO $$ BEGIN
    PERFORM sbq_send('s9_max2', 'm1', session_id => 'x', message_id => 'm1');
    PERFORM sbq_send('s9_max2', 'm2', session_id => 'x', message_id => 'm2');
END $$;
INSERT INTO tok SELECT 'x', session_token FROM sbq_accept_session('s9_max2');
INSERT INTO msg SELECT 'x' || message_id, lock_token, sequence_number, delivery_count
  FROM sbq_receive_session('s9_max2', (SELECT token FROM tok WHERE name = 'x'), 1);
DO $$ BEGIN PERFORM sbq_abandon('s9_max2', (SELECT lock_token FROM msg WHERE name = 'xm1')); END $$;
INSERT INTO msg SELECT 'y' || message_id, lock_token, sequence_number, delivery_count
  FROM sbq_receive_session('s9_max2', (SELECT token FROM tok WHERE name = 'x'), 2);
SELECT is((SELECT array_agg(name || ':' || dc ORDER BY seq) FROM msg WHERE name LIKE 'y%'),
    ARRAY['ym1:2', 'ym2:1'], 'R3.1 in sessions: the abandoned message comes back with delivery_count 2');

-- wait for the session locks of s9 and s9_max2 to run out
DO $$ BEGIN PERFORM pg_sleep(5.2); END $$;
SELECT is((SELECT locked_count || '/' || active_count FROM sbq_queue_stats WHERE queue = 's9_max2'), '0/2',
    'R9.7: once the session lock expired, its messages count as active, not locked');
SELECT throws_ok($$SELECT * FROM sbq_receive_session('s9_max2', (SELECT token FROM tok WHERE name = 'x'))$$,
    'SB004', NULL, 'R9.7: receive with an expired session token fails with SB004 (SessionLockLost)');
SELECT throws_ok($$SELECT sbq_renew_session('s9_max2', (SELECT token FROM tok WHERE name = 'x'))$$,
    'SB004', NULL, 'R9.7: renew of an expired session lock fails with SB004');
SELECT throws_ok($$SELECT sbq_complete('s9_max2', (SELECT lock_token FROM msg WHERE name = 'ym2'))$$,
    'SB002', NULL, 'R9.7: completing a message after its session lock expired fails with SB002');
SELECT throws_ok($$SELECT sbq_complete('s9_max2', ARRAY[(SELECT lock_token FROM msg WHERE name = 'ym2')])$$,
    'SB002', NULL, 'R9.7: complete(uuid[]) after the session lock expired fails with SB002');
SELECT is((SELECT session_id FROM sbq_accept_session('s9_max2')), 'x',
    'R9.7: once the lock expired, the session can be accepted again');
SELECT is((SELECT array_agg(message_id || ':' || dead_letter_reason) FROM sbq_peek('s9_max2/$deadletterqueue', 10)),
    ARRAY['m1:MaxDeliveryCountExceeded'],
    'R9.9, R3.9: the expiry counted m1''s second delivery, its last: dead-lettered');
SELECT is((SELECT array_agg(message_id || ':' || delivery_count) FROM sbq_peek('s9_max2', 10)),
    ARRAY['m2:1'], 'R9.9: the expiry counted m2''s delivery');
SELECT is((SELECT count(*) FROM sbq_receive('s9_max2/$deadletterqueue')), 1::bigint,
    'the dead-letter sub-queue of a session queue is received without sessions');

-- TTL in sessions: an expired message is dead-lettered, never handed out (t1, sent first)
INSERT INTO tok SELECT 't', session_token FROM sbq_accept_session('s9_ttl', 't');
SELECT is((SELECT array_agg(message_id) FROM sbq_receive_session('s9_ttl', (SELECT token FROM tok WHERE name = 't'), 5)),
    ARRAY['t2'], 'TTL in sessions: a message past its time to live is not handed out');
SELECT is((SELECT array_agg(message_id || ':' || dead_letter_reason) FROM sbq_peek('s9_ttl/$deadletterqueue', 10)),
    ARRAY['t1:TTLExpiredException'], 'TTL in sessions: it is dead-lettered as the queue says');

-- scheduled messages join their session when due: accept-next finds it without maintenance
SELECT is((SELECT session_id FROM sbq_accept_session('s9_sched')), 'sch',
    'R9.4: accept-next finds a session whose only message was scheduled and came due');

-- a purge takes the sessions it emptied out of accept-next's line
DO $$ BEGIN
    PERFORM sbq_send('s9_purge', 'x', session_id => 'p' || g) FROM generate_series(1, 1200) g;
    PERFORM sbq_purge_queue('s9_purge');
    PERFORM sbq_send('s9_purge', 'live', session_id => 'LIVE');
END $$;
SELECT is((SELECT session_id FROM sbq_accept_session('s9_purge')), 'LIVE',
    'R9.4: after a purge of 1,200 sessions, accept-next finds the live one at once');
SELECT is((SELECT count(*) FROM sbq_list_sessions('s9_purge')), 1::bigint,
    'R9.3: the sessions a purge emptied no longer exist');

-- bad input: SQLSTATE, nothing changed
SELECT throws_ok($$SELECT * FROM sbq_receive_session('s9', gen_random_uuid())$$, 'SB004', NULL,
    'bad input: an unknown session token is SB004');
SELECT throws_ok($$SELECT * FROM sbq_receive_session('s9_ttl', (SELECT token FROM tok WHERE name = 'b'))$$,
    'SB004', NULL, 'bad input: the session token of another queue is SB004');
SELECT throws_ok($$SELECT * FROM sbq_receive_session('s9', NULL)$$, '22004', NULL,
    'bad input: a NULL session token is 22004');
SELECT throws_ok($$SELECT * FROM sbq_accept_session(NULL)$$, '22004', NULL,
    'bad input: a NULL queue is 22004');
SELECT throws_ok($$SELECT * FROM sbq_accept_session('s9', repeat('s', 129))$$, '22023', NULL,
    'bad input: a session id longer than 128 characters is 22023');
SELECT throws_ok($$SELECT * FROM sbq_accept_session('s9/$deadletterqueue')$$, 'SB010', NULL,
    'bad input: the dead-letter sub-queue has no sessions (SB010)');
SELECT throws_ok($$SELECT * FROM sbq_receive_session('s9', (SELECT token FROM tok WHERE name = 'b'), 0)$$,
    '22023', NULL, 'bad input: max_messages 0 is 22023');
SELECT is((SELECT count(*) FROM sbq_list_sessions('s9') WHERE locked_until IS NOT NULL), 0::bigint,
    'bad input changed nothing: no session of s9 is held after the expiry');

-- accept-next behind many sessions it cannot take (R9.4: the next unlocked
-- session that has active messages; held ones: test/t/session_line.pl).
-- 1,500 sessions whose messages all expired in front of a live one: each look
-- at one takes it off the line and makes way, and counts against no limit
SELECT sbq_create_queue('s9_gone', requires_session => true);
SELECT count(sbq_send('s9_gone', 'old'::text, session_id => 'x' || g, time_to_live => '1 second'))
  FROM generate_series(1, 1500) g;
SELECT sbq_send('s9_gone', 'live'::text, session_id => 'LIVE');
DO $$ BEGIN PERFORM pg_sleep(1.2); END $$;
SELECT is((SELECT session_id FROM sbq_accept_session('s9_gone')), 'LIVE',
    'R9.4: accept-next takes the live session behind 1,500 whose messages expired, at the first call');

SELECT * FROM finish();
ROLLBACK;
