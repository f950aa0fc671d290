-- sbqueue pgTAP: sbq_maintain() and sbq_queue_stats (API Maintenance, Observability; test 93)
-- Sleeps: 5.5 s + 1.2 s. Time checks use the wall clock.
-- The exact counts of sbq_maintain() assume the database holds no committed messages
-- (as in the test runner's fresh database); other test files' data is uncommitted, so invisible.
BEGIN;
SELECT plan(46);

-- ------------------------------------------------ rights and shape
SELECT ok(NOT has_function_privilege('public', 'sbq_maintain()', 'EXECUTE'),
    'API Maintenance: sbq_maintain() is not executable by PUBLIC');
CREATE ROLE t15_nobody;
SELECT ok(NOT has_function_privilege('t15_nobody', 'sbq_maintain()', 'EXECUTE'),
    'API Maintenance: an ordinary role cannot execute sbq_maintain()');
CREATE FUNCTION pg_temp.try_maintain() RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    PERFORM sbq_maintain();
    RETURN 'no error';
EXCEPTION WHEN OTHERS THEN
    RETURN SQLSTATE;
END $$;
SET ROLE t15_nobody;
SELECT pg_temp.try_maintain() AS nobody_maintain \gset
RESET ROLE;
SELECT is(:'nobody_maintain'::text, '42501', 'API Rights: sbq_maintain() by an ordinary role fails with 42501');

DO $$ BEGIN
    PERFORM sbq_create_queue('t15', lock_duration => '5 seconds', max_delivery_count => 2,
                             dead_lettering_on_message_expiration => true);
    PERFORM sbq_create_queue('t15_drop', lock_duration => '5 seconds');
    PERFORM sbq_create_queue('t15_rcv', lock_duration => '5 seconds');
    PERFORM sbq_create_queue('t15_race');
    PERFORM sbq_create_queue('t15_cnt');
    PERFORM sbq_create_queue('t15_split');
END $$;

-- the first pass of this transaction runs while another session's pass is open
DO $$ BEGIN
    PERFORM sbq_create_queue('t15_g');
    PERFORM sbq_send('t15_g', 'g1'::text, message_id => 'g1', time_to_live => '1 second');
END $$;
DO $$ BEGIN PERFORM pg_sleep(1.2); END $$;
SELECT EXISTS (SELECT FROM pg_available_extensions WHERE name = 'dblink') AS have_dblink \gset
\if :have_dblink
CREATE EXTENSION IF NOT EXISTS dblink;
SELECT dblink_connect('t15_other', format('host=%s port=%s dbname=%s user=%s',
    split_part(current_setting('unix_socket_directories'), ',', 1), current_setting('port'),
    current_database(), current_user)) AS connected \gset
SELECT dblink_exec('t15_other', 'BEGIN') AS began \gset
SELECT j AS other_pass FROM dblink('t15_other', 'SELECT sbq_maintain()') AS t(j jsonb) \gset
\endif
CREATE TEMP TABLE m0 AS SELECT sbq_maintain() AS j;
\if :have_dblink
SELECT dblink_exec('t15_other', 'ROLLBACK') AS rolled_back \gset
SELECT dblink_disconnect('t15_other') AS disconnected \gset
\endif
SELECT ok((SELECT j ?& ARRAY['queues', 'scheduled_activated', 'locks_released', 'dead_lettered',
                             'expired_dead_lettered', 'expired_dropped', 'duplicates_forgotten', 'more'] FROM m0),
    'API Maintenance: sbq_maintain() returns an object with the keys queues, scheduled_activated, locks_released, dead_lettered, expired_dead_lettered, expired_dropped, duplicates_forgotten, more');
SELECT ok((SELECT bool_and(jsonb_typeof(j -> k) = 'number' AND (j ->> k)::numeric = trunc((j ->> k)::numeric)
                           AND (j ->> k)::numeric >= 0)
             FROM m0, unnest(ARRAY['queues', 'scheduled_activated', 'locks_released', 'dead_lettered',
                                   'expired_dead_lettered', 'expired_dropped', 'duplicates_forgotten']) AS k),
    'API Maintenance: the counts are non-negative integers');
SELECT is((SELECT jsonb_typeof(j -> 'more') FROM m0), 'boolean',
    'API Maintenance: more is a boolean');
SELECT is((SELECT (j ->> 'queues')::int FROM m0), (SELECT count(*)::int FROM sbq_queues),
    'API Maintenance: one pass visits every queue of the database');
SELECT is((SELECT ARRAY[(j ->> 'scheduled_activated')::int, (j ->> 'locks_released')::int, (j ->> 'dead_lettered')::int,
                        (j ->> 'expired_dead_lettered')::int, (j ->> 'expired_dropped')::int,
                        (j ->> 'duplicates_forgotten')::int] FROM m0), ARRAY[0, 0, 0, 0, 1, 0],
    'API Maintenance (safe to run concurrently with itself): the pass drops the expired g1 even while another session''s pass is open');
SELECT is_empty($$SELECT * FROM sbq_peek('t15_g', 10)$$,
    'API Maintenance: the expired message was dropped by this session''s pass');
SELECT is((SELECT j ->> 'more' FROM m0), 'false', 'API Maintenance: with little to do, more is false');
-- whatever that pass did, the rest of this file does not depend on it
DO $$ BEGIN PERFORM sbq_delete_queue('t15_g'); END $$;

-- ------------------------------------------------ counters (API Observability)
CREATE TEMP TABLE cs AS SELECT * FROM sbq_send_batch('t15_cnt', ARRAY['c1', 'c2', 'c3', 'c4', 'c5']::text[]) AS seq;
CREATE TEMP TABLE c1 AS SELECT * FROM sbq_receive('t15_cnt', 4);
DO $$ BEGIN
    PERFORM sbq_complete('t15_cnt', lock_token) FROM c1 WHERE convert_from(body, 'UTF8') = 'c1';
    PERFORM sbq_abandon('t15_cnt', lock_token) FROM c1 WHERE convert_from(body, 'UTF8') = 'c2';
    PERFORM sbq_defer('t15_cnt', lock_token) FROM c1 WHERE convert_from(body, 'UTF8') = 'c3';
    PERFORM sbq_deadletter('t15_cnt', lock_token, 'why') FROM c1 WHERE convert_from(body, 'UTF8') = 'c4';
END $$;
CREATE TEMP TABLE c2 AS SELECT * FROM sbq_receive('t15_cnt', 10);
DO $$ BEGIN PERFORM sbq_complete('t15_cnt', lock_token) FROM c2; END $$;
SELECT is((SELECT array_agg(convert_from(body, 'UTF8') ORDER BY sequence_number) FROM c2), ARRAY['c2', 'c5'],
    'setup: c2 (abandoned) and c5 are received again and completed');
SELECT is((SELECT ARRAY[sent, received, completed, abandoned, deferred, dead_lettered, expired]
             FROM sbq_queue_stats WHERE queue = 't15_cnt'), ARRAY[5, 6, 3, 1, 1, 1, 0]::bigint[],
    'API Observability: counters sent 5, received 6, completed 3, abandoned 1, deferred 1, dead_lettered 1, expired 0');
SELECT is((SELECT ARRAY[active_count, locked_count, deferred_count, scheduled_count, dead_letter_count]
             FROM sbq_queue_stats WHERE queue = 't15_cnt'), ARRAY[0, 0, 1, 0, 1]::bigint[],
    'API Observability: t15_cnt holds one deferred message and one dead letter');

-- ------------------------------------------------ the five counts split the messages (test 93)
CREATE TEMP TABLE sp (k text PRIMARY KEY, seq bigint);
INSERT INTO sp VALUES ('locked', sbq_send('t15_split', 'locked'::text, message_id => 'locked'));
INSERT INTO sp VALUES ('deferred', sbq_send('t15_split', 'deferred'::text, message_id => 'deferred'));
INSERT INTO sp VALUES ('deferred_locked', sbq_send('t15_split', 'deferred_locked'::text, message_id => 'deferred_locked'));
INSERT INTO sp VALUES ('dead', sbq_send('t15_split', 'dead'::text, message_id => 'dead'));
INSERT INTO sp VALUES ('dead_locked', sbq_send('t15_split', 'dead_locked'::text, message_id => 'dead_locked'));
CREATE TEMP TABLE spr AS SELECT * FROM sbq_receive('t15_split', 5);
DO $$ BEGIN
    PERFORM sbq_defer('t15_split', lock_token) FROM spr WHERE message_id LIKE 'deferred%';
    PERFORM sbq_deadletter('t15_split', lock_token) FROM spr WHERE message_id LIKE 'dead%';
    PERFORM sbq_receive('t15_split/$deadletterqueue');
    PERFORM sbq_receive_deferred('t15_split', ARRAY[(SELECT seq FROM sp WHERE k = 'deferred_locked')]);
END $$;
INSERT INTO sp VALUES ('scheduled', sbq_send('t15_split', 'scheduled'::text, message_id => 'scheduled',
                                              scheduled_enqueue_time => clock_timestamp() + interval '1 hour'));
INSERT INTO sp VALUES ('active1', sbq_send('t15_split', 'active1'::text, message_id => 'active1'));
INSERT INTO sp VALUES ('active2', sbq_send('t15_split', 'active2'::text, message_id => 'active2'));
SELECT is((SELECT ARRAY[active_count, locked_count, deferred_count, scheduled_count, dead_letter_count]
             FROM sbq_queue_stats WHERE queue = 't15_split'), ARRAY[2, 2, 1, 1, 2]::bigint[],
    'R11.1 (API Observability, test 93): active 2, locked 2 (one of them deferred), deferred 1, scheduled 1, dead letters 2 (one locked)');
SELECT is((SELECT active_count + locked_count + deferred_count + scheduled_count + dead_letter_count
             FROM sbq_queue_stats WHERE queue = 't15_split'),
          (SELECT count(*) FROM sbq_peek('t15_split', 100)) + (SELECT count(*) FROM sbq_peek('t15_split/$deadletterqueue', 100)),
    'API Observability: the five counts add up to every message, without overlap');
SELECT is((SELECT oldest_enqueued_time FROM sbq_queue_stats WHERE queue = 't15_split'),
          (SELECT enqueued_time FROM sbq_peek('t15_split') ),
    'API Observability: oldest_enqueued_time is the enqueued_time of the oldest message in the queue');

-- ------------------------------------------------ t = 0: work that becomes due
CREATE TEMP TABLE s (k text PRIMARY KEY, seq bigint);
INSERT INTO s VALUES
    ('k1', sbq_send('t15', 'k1'::text, message_id => 'k1')),
    ('k2', sbq_send('t15', 'k2'::text, message_id => 'k2')),
    ('k6', sbq_send('t15', 'k6'::text, message_id => 'k6')),
    ('k4', sbq_send('t15', 'k4'::text, message_id => 'k4', time_to_live => '2 seconds')),
    ('j2', sbq_send('t15_drop', 'j2'::text, message_id => 'j2', time_to_live => '2 seconds')),
    ('j3', sbq_send('t15_drop', 'j3'::text, message_id => 'j3')),
    ('r2', sbq_send('t15_rcv', 'r2'::text, message_id => 'r2'));
CREATE TEMP TABLE a1 AS
    SELECT * FROM sbq_receive('t15', 10)
    UNION ALL SELECT * FROM sbq_receive('t15_drop', 10)
    UNION ALL SELECT * FROM sbq_receive('t15_rcv', 10);
DO $$ BEGIN
    PERFORM sbq_abandon('t15', lock_token) FROM a1 WHERE message_id = 'k2';
    PERFORM sbq_defer('t15', lock_token) FROM a1 WHERE message_id IN ('k4', 'k6');
    PERFORM sbq_defer('t15_drop', lock_token) FROM a1 WHERE message_id IN ('j2', 'j3');
END $$;
CREATE TEMP TABLE a2 AS
    SELECT * FROM sbq_receive('t15', 10)
    UNION ALL SELECT * FROM sbq_receive_deferred('t15', ARRAY[(SELECT seq FROM s WHERE k = 'k6')])
    UNION ALL SELECT * FROM sbq_receive_deferred('t15_drop', ARRAY[(SELECT seq FROM s WHERE k = 'j3')]);
SELECT is((SELECT array_agg(message_id || ':' || delivery_count ORDER BY message_id COLLATE "C") FROM a2),
          ARRAY['j3:2', 'k2:2', 'k6:2'],
    'setup: k2 and k6 are on their last allowed delivery (2 of 2), j3 on its second');
INSERT INTO s VALUES
    ('k3', sbq_send('t15', 'k3'::text, message_id => 'k3', time_to_live => '1 second')),
    ('k5', sbq_send('t15', 'k5'::text, message_id => 'k5', scheduled_enqueue_time => clock_timestamp() + interval '2 seconds')),
    ('j1', sbq_send('t15_drop', 'j1'::text, message_id => 'j1', time_to_live => '1 second')),
    ('r1', sbq_send('t15_rcv', 'r1'::text, message_id => 'r1', time_to_live => '1 second'));

DO $$ BEGIN PERFORM pg_sleep(5.5); END $$;

-- ------------------------------------------------ t = 5.5: a receive meets expired work first
CREATE TEMP TABLE rc AS SELECT * FROM sbq_receive('t15_rcv', 10);
SELECT is((SELECT array_agg(message_id || ':' || delivery_count) FROM rc), ARRAY['r2:2'],
    'R2.4, R5: the receive returns the message whose lock expired (delivery 2) and not the expired one');
-- a fresh lock taken just before the pass
INSERT INTO s VALUES ('f1', sbq_send('t15_race', 'f1'::text, message_id => 'f1'));
CREATE TEMP TABLE fr AS SELECT * FROM sbq_receive('t15_race');

CREATE TEMP TABLE m1 AS SELECT sbq_maintain() AS j;
SELECT is((SELECT (j ->> 'scheduled_activated')::int FROM m1), 1,
    'API Maintenance: maintain activates the due scheduled message (k5)');
SELECT is((SELECT (j ->> 'locks_released')::int FROM m1), 2,
    'API Maintenance: maintain releases the two expired locks that were not last deliveries (k1, j3)');
SELECT is((SELECT (j ->> 'dead_lettered')::int FROM m1), 2,
    'API Maintenance: maintain dead-letters the two messages whose expired lock was their last allowed delivery (k2, k6)');
SELECT is((SELECT (j ->> 'expired_dead_lettered')::int FROM m1), 2,
    'API Maintenance: maintain dead-letters the two expired messages of a queue that says so (k3; k4, deferred)');
SELECT is((SELECT (j ->> 'expired_dropped')::int FROM m1), 2,
    'API Maintenance: maintain drops the two expired messages of a queue that does not (j1; j2, deferred)');
SELECT is((SELECT (j ->> 'duplicates_forgotten')::int FROM m1), 0,
    'API Maintenance: no duplicate-detection history to forget');
SELECT is((SELECT j ->> 'more' FROM m1), 'false',
    'API Maintenance: one pass did everything: more is false');

-- what the pass did
CREATE TEMP TABLE pm AS SELECT * FROM sbq_peek('t15', 100);
SELECT ok((SELECT state = 'active' AND delivery_count = 1 FROM pm WHERE message_id = 'k1'),
    'R2.4: after maintenance k1 is active again, delivery_count 1 (its expired delivery)');
SELECT ok((SELECT state = 'active' AND sequence_number > (SELECT max(seq) FROM s) FROM pm WHERE message_id = 'k5'),
    'R7.4: the activated message is active with a new, higher sequence number');
SELECT is((SELECT count(*) FROM pm), 2::bigint, 'API Maintenance: only k1 and k5 are left in t15');
SELECT is((SELECT array_agg(message_id || ':' || dead_letter_reason ORDER BY message_id COLLATE "C")
             FROM sbq_peek('t15/$deadletterqueue', 100)),
          ARRAY['k2:MaxDeliveryCountExceeded', 'k3:TTLExpiredException', 'k4:TTLExpiredException', 'k6:MaxDeliveryCountExceeded'],
    'R3.9, R3.11, R4.8: the dead letters carry MaxDeliveryCountExceeded or TTLExpiredException');
SELECT is((SELECT array_agg(message_id || ':' || delivery_count ORDER BY message_id COLLATE "C")
             FROM sbq_peek('t15/$deadletterqueue', 100) WHERE message_id IN ('k2', 'k6')),
          ARRAY['k2:2', 'k6:2'],
    'R3.5: the over-delivered dead letters keep delivery_count 2');
SELECT is((SELECT array_agg(message_id || ':' || state) FROM sbq_peek('t15_drop', 100)), ARRAY['j3:deferred'],
    'R4.7, R4.8: t15_drop: j1 and j2 were dropped, j3 (expired lock) is still deferred');
SELECT is_empty($$SELECT * FROM sbq_peek('t15_drop/$deadletterqueue', 100)$$,
    'R4.8: dropped messages are not dead-lettered');
SELECT is((SELECT ARRAY[active_count, locked_count, deferred_count, scheduled_count, dead_letter_count]
             FROM sbq_queue_stats WHERE queue = 't15'), ARRAY[2, 0, 0, 0, 4]::bigint[],
    'API Observability: after maintenance t15 has 2 active messages and 4 dead letters');
SELECT is((SELECT ARRAY[dead_lettered, expired] FROM sbq_queue_stats WHERE queue = 't15'), ARRAY[4, 2]::bigint[],
    'API Observability: t15 counters: dead_lettered 4, expired 2');
SELECT is((SELECT expired FROM sbq_queue_stats WHERE queue = 't15_drop'), 2::bigint,
    'API Observability: t15_drop counter: expired 2');
SELECT is((SELECT expired FROM sbq_queue_stats WHERE queue = 't15_rcv'), 1::bigint,
    'API Observability: t15_rcv counter: expired 1 (dropped by the receive)');

-- a lock taken before the pass survives it
SELECT lives_ok($$SELECT sbq_renew('t15_race', (SELECT lock_token FROM fr))$$,
    'API Maintenance: a valid lock taken before the pass (same transaction) is untouched');
SELECT lives_ok($$SELECT sbq_complete('t15_rcv', (SELECT lock_token FROM rc))$$,
    'API Maintenance: the lock taken by the receive that met expired work is untouched');

-- ------------------------------------------------ maintain twice in a row is idempotent
CREATE TEMP TABLE mid_peek AS
    SELECT q, p.* FROM unnest(ARRAY['t15', 't15_drop', 't15_rcv', 't15_race', 't15_cnt', 't15_split']) AS q,
                       LATERAL sbq_peek(q, 100) AS p;
CREATE TEMP TABLE m2 AS SELECT sbq_maintain() AS j;
SELECT is((SELECT ARRAY[(j ->> 'scheduled_activated')::int, (j ->> 'locks_released')::int, (j ->> 'dead_lettered')::int,
                        (j ->> 'expired_dead_lettered')::int, (j ->> 'expired_dropped')::int,
                        (j ->> 'duplicates_forgotten')::int] FROM m2), ARRAY[0, 0, 0, 0, 0, 0],
    'API Maintenance: a second pass right after the first finds nothing to do');
SELECT is((SELECT j ->> 'more' FROM m2), 'false', 'API Maintenance: the second pass reports more = false');
SELECT set_eq($$SELECT q, sequence_number, state, delivery_count, locked_until FROM mid_peek$$,
              $$SELECT q, p.sequence_number, p.state, p.delivery_count, p.locked_until
                  FROM unnest(ARRAY['t15', 't15_drop', 't15_rcv', 't15_race', 't15_cnt', 't15_split']) AS q,
                       LATERAL sbq_peek(q, 100) AS p$$,
    'API Maintenance: the second pass changed no message');

-- ------------------------------------------------ receive after maintain, same transaction
CREATE TEMP TABLE r3 AS SELECT * FROM sbq_receive('t15', 10);
SELECT is((SELECT array_agg(message_id || ':' || delivery_count ORDER BY sequence_number) FROM r3), ARRAY['k1:2', 'k5:1'],
    'R2.4, R7.4: after maintenance receive returns k1 (delivery 2) and the activated k5 (delivery 1)');
CREATE TEMP TABLE r4 AS SELECT * FROM sbq_receive_deferred('t15_drop', ARRAY[(SELECT seq FROM s WHERE k = 'j3')]);
SELECT is((SELECT message_id || ':' || delivery_count || ':' || state FROM r4), 'j3:3:deferred',
    'R4.7: the deferred message whose lock maintenance released is received by number again (delivery 3)');
CREATE TEMP TABLE m3 AS SELECT sbq_maintain() AS j;
SELECT is((SELECT (j ->> 'locks_released')::int + (j ->> 'dead_lettered')::int FROM m3), 0,
    'API Maintenance: a pass right after the receives releases none of their locks');
SELECT lives_ok($$SELECT sbq_complete('t15', ARRAY(SELECT lock_token FROM r3))$$,
    'API Maintenance: the locks of the receive are still valid after the pass');

-- the counters read from shared memory are read once for every queue of a
-- statement, and again after this transaction receives or settles, or rolls
-- back to a savepoint: within one statement (a DO block), a receive that
-- writes nothing (a lock in shared memory) shows in the next read, and one
-- rolled back no longer does
SELECT sbq_create_queue('t15_own') IS NULL AS created \gset
SELECT count(*) FROM sbq_send_batch('t15_own', ARRAY['a', 'b', 'c']) \gset
CREATE TEMP TABLE t15_own_reads (n int, received bigint, locked bigint);
DO $$
DECLARE
    r3 record;
BEGIN
    INSERT INTO t15_own_reads SELECT 1, received, locked_count FROM sbq_queue_stats WHERE queue = 't15_own';
    PERFORM count(*) FROM sbq_receive('t15_own', 2);
    INSERT INTO t15_own_reads SELECT 2, received, locked_count FROM sbq_queue_stats WHERE queue = 't15_own';
    BEGIN
        PERFORM count(*) FROM sbq_receive('t15_own', 1);
        SELECT received, locked_count INTO r3 FROM sbq_queue_stats WHERE queue = 't15_own';
        RAISE EXCEPTION 'roll the receive back';
    EXCEPTION WHEN raise_exception THEN
        NULL;
    END;
    INSERT INTO t15_own_reads VALUES (3, r3.received, r3.locked_count);
    INSERT INTO t15_own_reads SELECT 4, received, locked_count FROM sbq_queue_stats WHERE queue = 't15_own';
END $$;
SELECT results_eq($$SELECT n, received, locked FROM t15_own_reads ORDER BY n$$,
    $$VALUES (1, 0::bigint, 0::bigint), (2, 2::bigint, 2::bigint), (3, 3::bigint, 3::bigint),
             (4, 2::bigint, 2::bigint)$$,
    'API Maintenance: this transaction''s own receive counts in the next read of the stats, and not once rolled back');

SELECT * FROM finish();
ROLLBACK;
