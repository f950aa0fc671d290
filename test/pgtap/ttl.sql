-- sbqueue pgTAP: time to live (section 16 E, tests 37, 44, 46-49; R2.14, R4.8, R4.10)
-- Sleeps: 3 s + 3 s + 1.2 s. Time checks use the wall clock, so TTLs and locks run out inside this transaction.
BEGIN;
SELECT plan(56);

DO $$ BEGIN
    PERFORM sbq_create_queue('t12_drop', lock_duration => '5 seconds');
    PERFORM sbq_create_queue('t12_dl', lock_duration => '5 seconds', dead_lettering_on_message_expiration => true);
    PERFORM sbq_create_queue('t12_cap', default_message_ttl => '1 hour');
    PERFORM sbq_create_queue('t12_plain');
    PERFORM sbq_create_queue('t12_re', dead_lettering_on_message_expiration => true);
    PERFORM sbq_create_queue('t12_dlq', lock_duration => '5 seconds', default_message_ttl => '2 seconds',
                             dead_lettering_on_message_expiration => true);
END $$;

-- ------------------------------------------------ the TTL ceiling (test 48), no sleep
CREATE TEMP TABLE s (k text PRIMARY KEY, seq bigint);
INSERT INTO s VALUES
    ('cap_long', sbq_send('t12_cap', 'x'::text, message_id => 'cap_long', time_to_live => '1 day')),
    ('cap_short', sbq_send('t12_cap', 'x'::text, message_id => 'cap_short', time_to_live => '1 minute')),
    ('cap_default', sbq_send('t12_cap', 'x'::text, message_id => 'cap_default')),
    ('forever', sbq_send('t12_plain', 'x'::text, message_id => 'forever'));
CREATE TEMP TABLE pc AS SELECT * FROM sbq_peek('t12_cap', 10);
SELECT is((SELECT time_to_live FROM pc WHERE message_id = 'cap_long'), interval '1 hour',
    'R5 TimeToLive (test 48): a time_to_live above default_message_ttl is capped to it');
SELECT is((SELECT expires_at - enqueued_time FROM pc WHERE message_id = 'cap_long'), interval '1 hour',
    'R5 ExpiresAt (test 48): expires_at = enqueued_time + the capped time_to_live');
SELECT is((SELECT time_to_live FROM pc WHERE message_id = 'cap_short'), interval '1 minute',
    'R5 TimeToLive: a time_to_live below default_message_ttl is kept');
SELECT is((SELECT expires_at - enqueued_time FROM pc WHERE message_id = 'cap_short'), interval '1 minute',
    'R5 ExpiresAt: expires_at = enqueued_time + time_to_live');
SELECT is((SELECT time_to_live FROM pc WHERE message_id = 'cap_default'), interval '1 hour',
    'R5 TimeToLive: without time_to_live the queue''s default_message_ttl applies');
SELECT ok((SELECT time_to_live IS NULL AND expires_at IS NULL FROM sbq_peek('t12_plain') WHERE message_id = 'forever'),
    'API: on a queue without default_message_ttl a message sent without time_to_live never expires');

-- ------------------------------------------------ t = 0
-- locked now (lock 5 s), TTL 2 s
INSERT INTO s VALUES
    ('L3', sbq_send('t12_drop', 'L3'::text, message_id => 'L3', time_to_live => '2 seconds')),
    ('D1', sbq_send('t12_drop', 'D1'::text, message_id => 'D1', time_to_live => '2 seconds')),
    ('e2', sbq_send('t12_dl', 'e2'::text, message_id => 'e2', time_to_live => '1 second')),
    ('L1', sbq_send('t12_dl', 'L1'::text, message_id => 'L1', time_to_live => '2 seconds')),
    ('L2', sbq_send('t12_dl', 'L2'::text, message_id => 'L2', time_to_live => '2 seconds')),
    ('L4', sbq_send('t12_dl', 'L4'::text, message_id => 'L4', time_to_live => '2 seconds')),
    ('L5', sbq_send('t12_dl', 'L5'::text, message_id => 'L5', time_to_live => '2 seconds')),
    ('L7', sbq_send('t12_dl', 'L7'::text, message_id => 'L7', time_to_live => '2 seconds')),
    ('D2', sbq_send('t12_dl', 'D2'::text, message_id => 'D2', time_to_live => '2 seconds')),
    ('dead', sbq_send('t12_dlq', 'dead'::text, message_id => 'dead'));
CREATE TEMP TABLE lk AS
    SELECT * FROM sbq_receive('t12_dl', 10)
    UNION ALL SELECT * FROM sbq_receive('t12_drop', 10)
    UNION ALL SELECT * FROM sbq_receive('t12_dlq');
SELECT is((SELECT array_agg(message_id ORDER BY message_id COLLATE "C") FROM lk),
          ARRAY['D1', 'D2', 'L1', 'L2', 'L3', 'L4', 'L5', 'L7', 'dead', 'e2'],
    'R5: before their TTL passed all messages are received');
-- e2 is released again (not expired yet), D1 and D2 deferred, 'dead' dead-lettered
DO $$ BEGIN
    PERFORM sbq_abandon('t12_dl', lock_token) FROM lk WHERE message_id = 'e2';
    PERFORM sbq_defer('t12_dl', lock_token) FROM lk WHERE message_id = 'D2';
    PERFORM sbq_defer('t12_drop', lock_token) FROM lk WHERE message_id = 'D1';
    PERFORM sbq_deadletter('t12_dlq', lock_token, 'Poison') FROM lk WHERE message_id = 'dead';
END $$;
SELECT ok((SELECT expires_at = enqueued_time + interval '2 seconds' FROM lk WHERE message_id = 'L1'),
    'R5 ExpiresAt: a received message shows expires_at = enqueued_time + time_to_live');
-- not locked: e1 expires, keep does not
INSERT INTO s VALUES
    ('r1', sbq_send('t12_re', 'r1'::text, message_id => 'r1', time_to_live => '1 second')),
    ('e1', sbq_send('t12_drop', 'e1'::text, message_id => 'e1', time_to_live => '1 second')),
    ('keep', sbq_send('t12_drop', 'keep'::text, message_id => 'keep', time_to_live => '1 hour'));

DO $$ BEGIN PERFORM pg_sleep(3); END $$;

-- ------------------------------------------------ t = 3: expired, not locked (tests 46, 47)
CREATE TEMP TABLE rd AS SELECT * FROM sbq_receive('t12_drop', 10);
SELECT ok((SELECT NOT bool_or(message_id = 'e1') FROM rd),
    'R5, S5 (test 46): a message whose TTL passed is never received');
SELECT is_empty($$SELECT * FROM sbq_peek('t12_drop', 100) WHERE message_id = 'e1'$$,
    'S5 (test 46): without dead_lettering_on_message_expiration the receive that met it dropped it');
SELECT is_empty($$SELECT * FROM sbq_peek('t12_drop/$deadletterqueue', 100)$$,
    'S5 (test 46): the dropped message is not in the dead-letter queue');
SELECT ok((SELECT bool_or(message_id = 'keep') FROM rd),
    'R5: a message whose TTL has not passed is received');

SELECT is_empty($$SELECT * FROM sbq_receive('t12_dl', 10)$$,
    'R5, S5 (test 47): nothing receivable on t12_dl (expired or locked or deferred)');
SELECT is((SELECT dead_letter_reason FROM sbq_peek('t12_dl/$deadletterqueue', 100) WHERE message_id = 'e2'),
          'TTLExpiredException',
    'R3.11 (test 47): with dead_lettering_on_message_expiration the expired message is dead-lettered with TTLExpiredException');
SELECT is((SELECT dead_letter_source FROM sbq_peek('t12_dl/$deadletterqueue', 100) WHERE message_id = 'e2'), 't12_dl',
    'R3.11: the expired dead letter has dead_letter_source = the queue');
SELECT ok((SELECT coalesce(dead_letter_error_description, '') <> '' FROM sbq_peek('t12_dl/$deadletterqueue', 100) WHERE message_id = 'e2'),
    'R3.11: the expired dead letter has a non-empty dead_letter_error_description');
SELECT is_empty($$SELECT * FROM sbq_peek('t12_dl', 100) WHERE message_id = 'e2'$$,
    'S5 (test 47): the expired message left the queue');

-- locked when the TTL passed (test 49; R2.14, R4.10)
SELECT lives_ok($$SELECT sbq_complete('t12_dl', (SELECT lock_token FROM lk WHERE message_id = 'L1'))$$,
    'R2.14, R4.10 (test 49): a message locked when its TTL passed can still be completed');
SELECT is_empty($$SELECT * FROM sbq_peek('t12_dl/$deadletterqueue', 100) WHERE message_id = 'L1'$$,
    'R4.10: the completed message is not dead-lettered for its TTL');
SELECT lives_ok($$SELECT sbq_abandon('t12_dl', (SELECT lock_token FROM lk WHERE message_id = 'L2'))$$,
    'R2.14 (test 49): abandon of a locked message whose TTL passed succeeds');
SELECT is((SELECT dead_letter_reason FROM sbq_peek('t12_dl/$deadletterqueue', 100) WHERE message_id = 'L2'),
          'TTLExpiredException',
    'R2.14 (test 49): the abandon expires it at once: dead-lettered with TTLExpiredException');
SELECT lives_ok($$SELECT sbq_defer('t12_dl', (SELECT lock_token FROM lk WHERE message_id = 'L4'))$$,
    'R2.14: defer of a locked message whose TTL passed succeeds');
SELECT is((SELECT dead_letter_reason FROM sbq_peek('t12_dl/$deadletterqueue', 100) WHERE message_id = 'L4'),
          'TTLExpiredException',
    'R2.14: the defer expires it at once: dead-lettered with TTLExpiredException');
SELECT lives_ok($$SELECT sbq_deadletter('t12_dl', (SELECT lock_token FROM lk WHERE message_id = 'L5'), 'Mine', 'explicit')$$,
    'R2.14, R4.10: deadletter of a locked message whose TTL passed succeeds');
SELECT is((SELECT dead_letter_reason || '|' || dead_letter_error_description
             FROM sbq_peek('t12_dl/$deadletterqueue', 100) WHERE message_id = 'L5'), 'Mine|explicit',
    'R4.10: the explicit deadletter keeps its own reason and description');
SELECT lives_ok($$SELECT sbq_abandon('t12_drop', (SELECT lock_token FROM lk WHERE message_id = 'L3'))$$,
    'R2.14: abandon of a locked message whose TTL passed succeeds (queue without expiry dead-lettering)');
SELECT is_empty($$SELECT * FROM sbq_peek('t12_drop', 100) WHERE message_id = 'L3'
                  UNION ALL SELECT * FROM sbq_peek('t12_drop/$deadletterqueue', 100) WHERE message_id = 'L3'$$,
    'R2.14: without dead_lettering_on_message_expiration the abandon drops the expired message');
SELECT is((SELECT array_agg(message_id ORDER BY sequence_number) FROM sbq_peek('t12_dl', 100)), ARRAY['L7', 'D2'],
    'R2.14: L7 (still locked) and D2 (deferred) are left in t12_dl');

-- a resubmitted dead letter is a new message: its time to live counts from the resubmit
SELECT is_empty($$SELECT * FROM sbq_receive('t12_re')$$, 'S5: the expired r1 is not received');
CREATE TEMP TABLE re1 AS SELECT * FROM sbq_peek('t12_re/$deadletterqueue');
SELECT is((SELECT message_id || ':' || dead_letter_reason FROM re1), 'r1:TTLExpiredException',
    'R3.11: r1 was dead-lettered with TTLExpiredException');
SELECT is(sbq_resubmit('t12_re'), 1, 'API resubmit: the expired dead letter is resubmitted');
SELECT ok((SELECT expires_at = enqueued_time + interval '1 second' AND expires_at > clock_timestamp()
             AND time_to_live = interval '1 second' FROM sbq_peek('t12_re')),
    'R5 ExpiresAt, API resubmit: the resubmitted message expires time_to_live after its new enqueued_time');
CREATE TEMP TABLE re2 AS SELECT * FROM sbq_receive('t12_re');
SELECT is((SELECT message_id || ':' || delivery_count FROM re2), 'r1:1',
    'API resubmit: the resubmitted message is received at once (it is not expired)');

-- expired deferred messages (test 37; R4.8)
SELECT throws_ok(format('SELECT * FROM sbq_receive_deferred(%L, ARRAY[%s]::bigint[])', 't12_dl',
                        (SELECT seq FROM s WHERE k = 'D2')), 'SB003', NULL,
    'R4.8 (test 37): receive_deferred of a deferred message whose TTL passed fails with SB003');
SELECT throws_ok(format('SELECT * FROM sbq_receive_deferred(%L, ARRAY[%s]::bigint[])', 't12_drop',
                        (SELECT seq FROM s WHERE k = 'D1')), 'SB003', NULL,
    'R4.8: receive_deferred of an expired deferred message fails with SB003 (queue without expiry dead-lettering)');
CREATE TEMP TABLE mt AS SELECT sbq_maintain() AS j;
SELECT is((SELECT dead_letter_reason FROM sbq_peek('t12_dl/$deadletterqueue', 100) WHERE message_id = 'D2'),
          'TTLExpiredException',
    'R4.8 (test 37): maintenance dead-letters the expired deferred message with TTLExpiredException');
SELECT is_empty($$SELECT * FROM sbq_peek('t12_dl', 100) WHERE message_id = 'D2'$$,
    'R4.8: the expired deferred message left the queue');
SELECT is_empty($$SELECT * FROM sbq_peek('t12_drop', 100) WHERE message_id = 'D1'
                  UNION ALL SELECT * FROM sbq_peek('t12_drop/$deadletterqueue', 100) WHERE message_id = 'D1'$$,
    'R4.8: maintenance drops the expired deferred message of a queue without expiry dead-lettering');
SELECT is((SELECT (j ->> 'expired_dead_lettered')::int FROM mt), 1,
    'API Maintenance: maintain reports one expired message dead-lettered (D2)');
SELECT is((SELECT (j ->> 'expired_dropped')::int FROM mt), 1,
    'API Maintenance: maintain reports one expired message dropped (D1)');
SELECT ok((SELECT (j ->> 'locks_released')::int = 0 AND (j ->> 'dead_lettered')::int = 0 FROM mt),
    'R2.14: maintain did not touch L7, whose lock is still valid');

-- a dead letter never expires (test 44): queue TTL 2 s, dead-lettered at t = 0
SELECT is((SELECT message_id FROM sbq_peek('t12_dlq/$deadletterqueue')), 'dead',
    'R3.14 (test 44): at t = 3 the dead letter is still in the dead-letter queue (TTL 2 s not observed)');

DO $$ BEGIN PERFORM pg_sleep(3); END $$;

-- ------------------------------------------------ t = 6: L7's lock (5 s) has expired
SELECT is_empty($$SELECT * FROM sbq_receive('t12_dl', 10)$$,
    'R2.14: when the lock of a message whose TTL passed expires, the message is not delivered again');
SELECT is((SELECT dead_letter_reason FROM sbq_peek('t12_dl/$deadletterqueue', 100) WHERE message_id = 'L7'),
          'TTLExpiredException',
    'R2.14: ... it is dead-lettered with TTLExpiredException');
SELECT is_empty($$SELECT * FROM sbq_peek('t12_dl', 100)$$,
    'R2.14: t12_dl is empty');
SELECT throws_ok($$SELECT sbq_complete('t12_dl', (SELECT lock_token FROM lk WHERE message_id = 'L7'))$$, 'SB002', NULL,
    'R2.9a: the expired token of L7 fails with SB002');
SELECT is((SELECT ARRAY[active_count, locked_count, deferred_count, scheduled_count, dead_letter_count]
             FROM sbq_queue_stats WHERE queue = 't12_dl'), ARRAY[0, 0, 0, 0, 6]::bigint[],
    'API Observability: t12_dl has six dead letters (e2, L2, L4, L5, D2, L7) and nothing else');
SELECT is((SELECT expired FROM sbq_queue_stats WHERE queue = 't12_dl'), 5::bigint,
    'API Observability: the expired counter of t12_dl counts e2, L2, L4, D2, L7');
SELECT is((SELECT expired FROM sbq_queue_stats WHERE queue = 't12_drop'), 3::bigint,
    'API Observability: the expired counter of t12_drop counts e1, L3, D1');

SELECT is((SELECT message_id || ':' || dead_letter_reason FROM sbq_peek('t12_dlq/$deadletterqueue')), 'dead:Poison',
    'R3.14 (test 44): at t = 6 the dead letter is still in the dead-letter queue');
SELECT is((SELECT dead_letter_count FROM sbq_queue_stats WHERE queue = 't12_dlq'), 1::bigint,
    'R3.14: it counts as a dead letter');
CREATE TEMP TABLE dq AS SELECT sbq_maintain() AS j;
CREATE TEMP TABLE dr AS SELECT * FROM sbq_receive('t12_dlq/$deadletterqueue');
SELECT is((SELECT message_id FROM dr), 'dead',
    'R3.14 (test 44): after maintenance the dead letter whose TTL passed is still received from the dead-letter queue');
SELECT lives_ok($$SELECT sbq_complete('t12_dlq/$deadletterqueue', (SELECT lock_token FROM dr))$$,
    'R3.14: and completed there');
SELECT is((SELECT (j ->> 'expired_dead_lettered')::int + (j ->> 'expired_dropped')::int FROM dq), 0,
    'R3.14: maintenance expired nothing (dead letters never expire; L7 was already dead-lettered by the receive)');

-- ------------------------------------------------ many expired ahead of a live one
-- a receive of 1 behind 200 expired messages: each pass of the receive drops
-- what it read and reads on, however many passes that takes (it gave up after
-- 65 passes that handed nothing out, and returned no row)
SELECT sbq_create_queue('t12_many');
SELECT count(sbq_send('t12_many', ('old ' || i)::text, time_to_live => '1 second')) FROM generate_series(1, 200) i;
SELECT sbq_send('t12_many', 'live'::text, message_id => 'live');
DO $$ BEGIN PERFORM pg_sleep(1.2); END $$;
SELECT is((SELECT string_agg(message_id, ',') FROM sbq_receive('t12_many', 1)), 'live',
    'S9: a receive of 1 behind 200 expired messages gets the live one');
SELECT is((SELECT expired FROM sbq_queue_stats WHERE queue = 't12_many'), 200::bigint,
    'S9: ... and the 200 expired ones were dropped on the way');

SELECT * FROM finish();
ROLLBACK;
