-- sbqueue pgTAP: dead_letter_ttl, a queue's retention for its dead letters. The
-- times dead letters arrived are moved back in sbq.dead_letters: no sleeps.
BEGIN;
SELECT plan(23);

-- ------------------------------------------------ the property
SELECT is((SELECT dead_letter_ttl FROM sbq_create_queue('dt_keep')), NULL::interval,
    'a queue keeps its dead letters by default (dead_letter_ttl NULL)');
SELECT is((SELECT dead_letter_ttl FROM sbq_create_queue('dt', dead_letter_ttl => '1 hour')),
    '1 hour'::interval, 'sbq_create_queue sets dead_letter_ttl');
SELECT is((SELECT dead_letter_ttl FROM sbq_get_queue('dt/$deadletterqueue')), '1 hour'::interval,
    'sbq_get_queue shows it');
SELECT is((SELECT dead_letter_ttl FROM sbq_queues WHERE queue = 'dt'), '1 hour'::interval,
    'sbq_queues shows it');
SELECT is((SELECT dead_letter_ttl FROM sbq_update_queue('dt', max_delivery_count => 3)),
    '1 hour'::interval, 'sbq_update_queue without it leaves it as it is');
SELECT is((SELECT dead_letter_ttl FROM sbq_update_queue('dt', dead_letter_ttl => '2 hours')),
    '2 hours'::interval, 'sbq_update_queue changes it');
SELECT throws_ok($$SELECT sbq_create_queue('dt_bad', dead_letter_ttl => '0 seconds')$$,
    '22023', NULL, 'a dead_letter_ttl under 1 second fails with 22023');
SELECT throws_ok($$SELECT sbq_update_queue('dt', dead_letter_ttl => '-1 hour')$$,
    '22023', NULL, 'a negative dead_letter_ttl fails with 22023');
SELECT is((SELECT dead_letter_ttl FROM sbq_get_queue('dt')), '2 hours'::interval,
    'the failed update changed nothing');
SELECT is((SELECT count(*) FROM sbq_queues WHERE queue = 'dt_bad'), 0::bigint,
    'the failed create made no queue');

-- Receive up to n messages of queue q and dead-letter each; returns how many.
CREATE FUNCTION pg_temp.deadletter_all(q text, n int) RETURNS int LANGUAGE plpgsql AS $$
DECLARE
    m record;
    done int := 0;
BEGIN
    FOR m IN SELECT * FROM sbq_receive(q, n) LOOP
        PERFORM sbq_deadletter(q, m.lock_token, 'test');
        done := done + 1;
    END LOOP;
    RETURN done;
END $$;

-- ------------------------------------------------ dead letters of three ages
CREATE TEMP TABLE s (k text PRIMARY KEY, seq bigint);
INSERT INTO s SELECT k, sbq_send(q, k) FROM (VALUES (1, 'locked', 'dt'), (2, 'old', 'dt'),
    (3, 'young', 'dt'), (4, 'kept', 'dt_keep')) v(i, k, q) ORDER BY i;
SELECT pg_temp.deadletter_all('dt', 10), pg_temp.deadletter_all('dt_keep', 10);
UPDATE sbq.dead_letters d SET dead_lettered_at = now() - CASE s.k
    WHEN 'old' THEN interval '3 hours' WHEN 'locked' THEN interval '3 hours'
    WHEN 'young' THEN interval '1 hour' ELSE interval '100 days' END
  FROM s WHERE d.sequence_number = s.seq;

-- one old dead letter under a lock (in shared memory or in its row, as the session says)
CREATE TEMP TABLE r AS SELECT * FROM sbq_receive('dt/$deadletterqueue');
SELECT is((SELECT sequence_number FROM r), (SELECT seq FROM s WHERE k = 'locked'),
    'the DLQ hands out its first dead letter under a lock');

SELECT is((sbq_maintain() ->> 'dead_letters_removed')::int, 1,
    'a pass removes the one dead letter past the ttl that no lock holds');
SELECT set_eq($$SELECT sequence_number FROM sbq_peek('dt/$deadletterqueue', 10)$$,
    $$SELECT seq FROM s WHERE k IN ('locked', 'young')$$,
    'the locked old one and the young one are still there');
SELECT is((SELECT count(*) FROM sbq.dead_letters d JOIN s ON s.seq = d.sequence_number WHERE s.k = 'old'),
    0::bigint, 'the removed one is gone from sbq.dead_letters');
SELECT is((SELECT count(*) FROM sbq_peek('dt_keep/$deadletterqueue', 10)), 1::bigint,
    'a queue without dead_letter_ttl keeps a dead letter 100 days old');
SELECT lives_ok(format('SELECT sbq_complete(%L, %L::uuid)', 'dt/$deadletterqueue',
    (SELECT lock_token FROM r)), 'the lock on the old dead letter is still valid: complete succeeds');
SELECT is((sbq_maintain() ->> 'dead_letters_removed')::int, 0,
    'nothing else is old enough');
SELECT is((SELECT dead_letter_count FROM sbq_queue_stats WHERE queue = 'dt'), 1::bigint,
    'sbq_queue_stats counts the one left');

-- ------------------------------------------------ bounded: 1,000 a queue a pass, oldest first
DELETE FROM s;
INSERT INTO s SELECT 'b' || i, sbq_send('dt', 'bulk ' || i) FROM generate_series(1, 1005) i;
SELECT pg_temp.deadletter_all('dt', 1005);
-- the first sent is the youngest dead letter
UPDATE sbq.dead_letters d SET dead_lettered_at = now() - interval '1 day'
       - (substr(s.k, 2)::int * interval '1 second')
  FROM s WHERE d.sequence_number = s.seq;
SELECT is(sbq_maintain() @> '{"dead_letters_removed": 1000, "more": true}', true,
    'a pass removes 1,000 and says there is more');
SELECT set_eq($$SELECT d.sequence_number FROM sbq.dead_letters d JOIN s ON s.seq = d.sequence_number$$,
    $$SELECT seq FROM s WHERE substr(k, 2)::int <= 5$$,
    'the 1,000 oldest went, the 5 youngest are left');
SELECT is((sbq_maintain() ->> 'dead_letters_removed')::int, 5, 'the next pass removes the rest');
SELECT is((SELECT count(*) FROM sbq_peek('dt/$deadletterqueue', 10)), 1::bigint,
    'only the young dead letter of before is left');
SELECT is((SELECT count(*) FROM sbq_peek('dt', 10)), 0::bigint,
    'retention never touches the queue itself');

SELECT * FROM finish();
ROLLBACK;
