-- sbqueue pgTAP: dead letters live in sbq.dead_letters (0.4). Every path that
-- dead-letters moves the message's row out of sbq.messages into sbq.dead_letters in
-- the same transaction; resubmit moves it back as a new message; the dead-letter
-- sub-queue's receive, settle, purge and counts work on sbq.dead_letters.
-- Sleeps: 5.5 s (locks of 5 s and times to live of 4 s run out). Time checks use the
-- wall clock. Values made inside a rolled-back savepoint are carried out in psql
-- variables (\gset).
BEGIN;
SELECT plan(130);

DO $$ BEGIN
    PERFORM sbq_create_queue('dlt_exp');
    PERFORM sbq_create_queue('dlt_ab', max_delivery_count => 2);
    PERFORM sbq_create_queue('dlt_df', max_delivery_count => 1);
    PERFORM sbq_create_queue('dlt_ops', lock_duration => '5 seconds');
    PERFORM sbq_create_queue('dlt_rs');
    PERFORM sbq_create_queue('dlt_pg');
    PERFORM sbq_create_queue('dlt_del');
    -- lock expiry on the last allowed delivery, found by a peek-lock receive, by
    -- sbq_maintain, by a receive_and_delete (with locks in shared memory: its sweep
    -- of the queue's expired leases)
    PERFORM sbq_create_queue('dlt_lr', lock_duration => '5 seconds', max_delivery_count => 2);
    PERFORM sbq_create_queue('dlt_lm', lock_duration => '5 seconds', max_delivery_count => 1);
    -- ... and by sbq_maintain, a deferred message locked by receive_deferred
    PERFORM sbq_create_queue('dlt_lq', lock_duration => '5 seconds', max_delivery_count => 2);
    PERFORM sbq_create_queue('dlt_ld', lock_duration => '5 seconds', max_delivery_count => 1);
    -- time to live passed, found by a receive, by sbq_maintain, by abandon and defer
    PERFORM sbq_create_queue('dlt_tr', dead_lettering_on_message_expiration => true);
    PERFORM sbq_create_queue('dlt_tm', dead_lettering_on_message_expiration => true);
    PERFORM sbq_create_queue('dlt_tq', dead_lettering_on_message_expiration => true);
    PERFORM sbq_create_queue('dlt_ta', lock_duration => '1 minute', dead_lettering_on_message_expiration => true);
    -- dead letters received under locks that run out: found by maintain, by a receive
    -- from the dead-letter queue, by a resubmit
    PERFORM sbq_create_queue('dlt_dx', lock_duration => '5 seconds');
    PERFORM sbq_create_queue('dlt_dy', lock_duration => '5 seconds');
    PERFORM sbq_create_queue('dlt_dz', lock_duration => '5 seconds');
END $$;

-- Where a message's row is: 'messages', 'dead_letters', 'both' or 'nowhere'.
CREATE FUNCTION pg_temp.where_is(seq bigint) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    m boolean := EXISTS (SELECT 1 FROM sbq.messages WHERE sequence_number = seq);
    d boolean := EXISTS (SELECT 1 FROM sbq.dead_letters WHERE sequence_number = seq);
BEGIN
    RETURN CASE WHEN m AND d THEN 'both' WHEN m THEN 'messages' WHEN d THEN 'dead_letters' ELSE 'nowhere' END;
END $$;

-- The dead-letter columns of a row of sbq.dead_letters (NULL when there is none).
CREATE FUNCTION pg_temp.dl(seq bigint) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    r text;
BEGIN
    SELECT format('%s | %s | %s | delivery_count %s | subqueue %s | state %s | lock %s',
                  coalesce(d.dead_letter_reason, '-'), coalesce(d.dead_letter_error_description, '-'),
                  coalesce(d.dead_letter_source, '-'), d.delivery_count, d.subqueue, d.state,
                  CASE WHEN d.lock_token IS NULL AND d.locked_until IS NULL THEN 'none' ELSE 'in row' END)
      INTO r FROM sbq.dead_letters d WHERE d.sequence_number = seq;
    RETURN r;
END $$;

-- What a message carries, as its row in the table tbl shows it (NULL when there is
-- none): properties, body and times; application_properties apart (settlements merge).
CREATE FUNCTION pg_temp.payload(seq bigint, tbl text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    r text;
BEGIN
    EXECUTE format('SELECT row(t.queue_id, t.message_id, t.session_id, t.correlation_id, t.subject,'
                   ' t.content_type, t.reply_to, t.reply_to_session_id, t.to_address,'
                   ' t.enqueued_time, t.scheduled_enqueue_time, t.expires_at, t.time_to_live,'
                   ' md5(t.body))::text FROM %s t WHERE t.sequence_number = $1', tbl)
      INTO r USING seq;
    RETURN r;
END $$;

-- Where message k is after a dead-lettering, as up to four assertions named by what[]:
-- its row moved to sbq.dead_letters; it is dead-lettered as want (pg_temp.dl); when
-- since is given, dead_lettered_at lies between since and now; its properties, body
-- and times are as sent.
CREATE FUNCTION pg_temp.moved(k text, want text, since timestamptz, what text[])
RETURNS SETOF text LANGUAGE plpgsql AS $$
DECLARE
    seq bigint := (SELECT s.seq FROM s WHERE s.k = moved.k);
    i int := 1;
BEGIN
    RETURN NEXT is(pg_temp.where_is(seq), 'dead_letters', what[i]);
    i := i + 1;
    RETURN NEXT is(pg_temp.dl(seq), want, what[i]);
    i := i + 1;
    IF since IS NOT NULL THEN
        RETURN NEXT ok((SELECT d.dead_lettered_at BETWEEN since AND clock_timestamp()
                          FROM sbq.dead_letters d WHERE d.sequence_number = seq), what[i]);
        i := i + 1;
    END IF;
    RETURN NEXT is(pg_temp.payload(seq, 'sbq.dead_letters'), pg_temp.payload(seq, 'sent'), what[i]);
END $$;

CREATE FUNCTION pg_temp.props(seq bigint) RETURNS jsonb LANGUAGE sql AS $$
    SELECT application_properties FROM sbq.dead_letters WHERE sequence_number = seq
$$;

-- The lock of a message in either table, be it a lease or stored in the row.
CREATE FUNCTION pg_temp.lock_until(seq bigint) RETURNS timestamptz LANGUAGE plpgsql AS $$
DECLARE
    until timestamptz;
BEGIN
    SELECT coalesce(sbq.lease_until(t.sequence_number), t.locked_until) INTO until
      FROM (SELECT sequence_number, locked_until FROM sbq.messages WHERE sequence_number = seq
            UNION ALL
            SELECT sequence_number, locked_until FROM sbq.dead_letters WHERE sequence_number = seq) t;
    RETURN until;
END $$;

-- sbq_queue_stats.dead_letter_count against the rows of sbq.dead_letters, per queue
CREATE FUNCTION pg_temp.stats_vs_rows() RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    r text;
BEGIN
    SELECT coalesce(string_agg(format('%s: %s in stats, %s rows', s.queue, s.dead_letter_count, n.rows),
                               '; ' ORDER BY s.queue), 'all equal')
      INTO r
      FROM sbq_queue_stats s
      JOIN LATERAL (SELECT count(*) AS rows FROM sbq.dead_letters d JOIN sbq.queues q USING (queue_id)
                     WHERE q.name = s.queue) n ON true
     WHERE s.dead_letter_count <> n.rows;
    RETURN r;
END $$;

CREATE FUNCTION pg_temp.send(q text, id text, ttl interval DEFAULT NULL) RETURNS bigint LANGUAGE sql AS $$
    SELECT sbq_send(q, 'body of ' || id, message_id => id, correlation_id => 'corr-' || id,
                    subject => 'subject ' || id, content_type => 'text/plain', reply_to => 'replies',
                    reply_to_session_id => 'rs', to_address => 'to-' || id, time_to_live => ttl,
                    application_properties => jsonb_build_object('id', id, 'p', 'old', 'n', 1))
$$;

-- ------------------------------------------------ t = 0: every message, as sent
CREATE TEMP TABLE s (k text PRIMARY KEY, seq bigint);
INSERT INTO s VALUES
    ('ta_ab', pg_temp.send('dlt_ta', 'ta_ab', '4 seconds')),
    ('ta_df', pg_temp.send('dlt_ta', 'ta_df', '4 seconds'));
-- locked before their time to live passes (1 minute locks)
CREATE TEMP TABLE ta AS SELECT * FROM sbq_receive('dlt_ta', 2);
INSERT INTO s VALUES
    ('x1', pg_temp.send('dlt_exp', 'x1', '1 day')),
    ('ab', pg_temp.send('dlt_ab', 'ab')),
    ('df', pg_temp.send('dlt_df', 'df')),
    ('o1', pg_temp.send('dlt_ops', 'o1')),
    ('o2', pg_temp.send('dlt_ops', 'o2')),
    ('r1', pg_temp.send('dlt_rs', 'r1', '1 hour')),
    ('r2', pg_temp.send('dlt_rs', 'r2')),
    ('r3', pg_temp.send('dlt_rs', 'r3')),
    ('p1', pg_temp.send('dlt_pg', 'p1')),
    ('p2', pg_temp.send('dlt_pg', 'p2')),
    ('p3', pg_temp.send('dlt_pg', 'p3')),
    ('e1', pg_temp.send('dlt_del', 'e1')),
    ('e2', pg_temp.send('dlt_del', 'e2')),
    ('e3', pg_temp.send('dlt_del', 'e3')),
    ('e4', pg_temp.send('dlt_del', 'e4')),
    ('lr', pg_temp.send('dlt_lr', 'lr')),
    ('lm', pg_temp.send('dlt_lm', 'lm')),
    ('lq', pg_temp.send('dlt_lq', 'lq')),
    ('ld', pg_temp.send('dlt_ld', 'ld')),
    ('tr', pg_temp.send('dlt_tr', 'tr', '4 seconds')),
    ('tm', pg_temp.send('dlt_tm', 'tm', '4 seconds')),
    ('tq', pg_temp.send('dlt_tq', 'tq', '4 seconds')),
    ('dx', pg_temp.send('dlt_dx', 'dx')),
    ('dy', pg_temp.send('dlt_dy', 'dy')),
    ('dz', pg_temp.send('dlt_dz', 'dz'));
CREATE TEMP TABLE sent AS SELECT m.* FROM sbq.messages m JOIN s ON s.seq = m.sequence_number;
SELECT is((SELECT count(*) FROM sent), 27::bigint, 'setup: the 27 messages sent are rows of sbq.messages');

-- the locks that run out during the sleep below (5 s)
CREATE TEMP TABLE lr1 AS SELECT * FROM sbq_receive('dlt_lr');
DO $$ BEGIN PERFORM sbq_abandon('dlt_lr', (SELECT lock_token FROM lr1)); END $$;
CREATE TEMP TABLE lk AS
    SELECT * FROM sbq_receive('dlt_lr')
    UNION ALL SELECT * FROM sbq_receive('dlt_lm')
    UNION ALL SELECT * FROM sbq_receive('dlt_ld');
SELECT is((SELECT array_agg(message_id || ':' || delivery_count ORDER BY message_id) FROM lk),
          ARRAY['ld:1', 'lm:1', 'lr:2'],
    'setup: lr, lm and ld are locked on their last allowed delivery');
-- lq: deferred, then locked by receive_deferred on its last allowed delivery; tq: deferred
CREATE TEMP TABLE lq1 AS SELECT * FROM sbq_receive('dlt_lq') UNION ALL SELECT * FROM sbq_receive('dlt_tq');
DO $$ BEGIN
    PERFORM sbq_defer('dlt_lq', (SELECT lock_token FROM lq1 WHERE message_id = 'lq'));
    PERFORM sbq_defer('dlt_tq', (SELECT lock_token FROM lq1 WHERE message_id = 'tq'));
END $$;
CREATE TEMP TABLE lq2 AS SELECT * FROM sbq_receive_deferred('dlt_lq', ARRAY[(SELECT seq FROM s WHERE k = 'lq')]);
SELECT is((SELECT message_id || ':' || delivery_count || ':' || state FROM lq2), 'lq:2:deferred',
    'setup: the deferred lq is locked by receive_deferred on its last allowed delivery');
CREATE TEMP TABLE dx1 AS
    SELECT * FROM sbq_receive('dlt_dx') UNION ALL SELECT * FROM sbq_receive('dlt_dy')
    UNION ALL SELECT * FROM sbq_receive('dlt_dz');
DO $$ BEGIN
    PERFORM sbq_deadletter('dlt_dx', (SELECT lock_token FROM dx1 WHERE message_id = 'dx'), 'dx');
    PERFORM sbq_deadletter('dlt_dy', (SELECT lock_token FROM dx1 WHERE message_id = 'dy'), 'dy');
    PERFORM sbq_deadletter('dlt_dz', (SELECT lock_token FROM dx1 WHERE message_id = 'dz'), 'dz');
END $$;
CREATE TEMP TABLE dx2 AS
    SELECT * FROM sbq_receive('dlt_dx/$deadletterqueue') UNION ALL SELECT * FROM sbq_receive('dlt_dy/$deadletterqueue')
    UNION ALL SELECT * FROM sbq_receive('dlt_dz/$deadletterqueue');
SELECT is((SELECT array_agg(message_id || ':' || delivery_count ORDER BY message_id) FROM dx2), ARRAY['dx:2', 'dy:2', 'dz:2'],
    'setup: the dead letters dx, dy, dz are received from their dead-letter queues (locks of 5 s)');

-- ------------------------------------------------ explicit sbq_deadletter
CREATE TEMP TABLE x AS SELECT * FROM sbq_receive('dlt_exp');
SAVEPOINT s_dl;
DO $$ BEGIN PERFORM sbq_deadletter('dlt_exp', (SELECT lock_token FROM x), 'Rolled', 'back'); END $$;
SELECT pg_temp.where_is((SELECT seq FROM s WHERE k = 'x1')) AS where_in_sp \gset
ROLLBACK TO SAVEPOINT s_dl;
SELECT is(:'where_in_sp'::text, 'dead_letters',
    'deadletter: inside the savepoint the row had moved to sbq.dead_letters');
SELECT is(pg_temp.where_is((SELECT seq FROM s WHERE k = 'x1')), 'messages',
    'deadletter rolled back: the row is back in sbq.messages, not in sbq.dead_letters');
SELECT is((SELECT format('subqueue %s, state %s, reason %s', subqueue, state, coalesce(dead_letter_reason, '-'))
             FROM sbq.messages WHERE sequence_number = (SELECT seq FROM s WHERE k = 'x1')),
          'subqueue 0, state 0, reason -',
    'deadletter rolled back: the row in sbq.messages is unchanged');
SELECT cmp_ok(pg_temp.lock_until((SELECT seq FROM s WHERE k = 'x1')), '>', clock_timestamp(),
    'deadletter rolled back: the message is still locked');

CREATE TEMP TABLE t_x AS SELECT clock_timestamp() AS before;
SELECT lives_ok($$SELECT sbq_deadletter('dlt_exp', (SELECT lock_token FROM x), 'BadData', 'field x missing',
                                        '{"p": "new", "z": null}')$$,
    'deadletter: the lock of the rolled-back deadletter still dead-letters');
SELECT * FROM pg_temp.moved('x1',
        'BadData | field x missing | dlt_exp | delivery_count 1 | subqueue 1 | state 0 | lock none',
        (SELECT before FROM t_x),
    ARRAY[
    'deadletter: the row moved from sbq.messages to sbq.dead_letters, same sequence number',
    'deadletter: reason, description, source, delivery count, state; no lock',
    'deadletter: dead_lettered_at is the time of the call',
    'deadletter: properties, body, enqueued and expiry times as sent']);
SELECT is(pg_temp.props((SELECT seq FROM s WHERE k = 'x1')), '{"id": "x1", "p": "new", "n": 1, "z": null}'::jsonb,
    'deadletter: properties_to_modify merged into the application properties');
SELECT is((SELECT ARRAY[active_count, locked_count, dead_letter_count] FROM sbq_queue_stats WHERE queue = 'dlt_exp'),
          ARRAY[0, 0, 1]::bigint[],
    'deadletter: sbq_queue_stats counts it as a dead letter only');
SELECT throws_ok($$SELECT sbq_complete('dlt_exp', (SELECT lock_token FROM x))$$, 'SB002', NULL,
    'deadletter: the token is no lock any more');

-- ------------------------------------------------ abandon on the last allowed delivery
CREATE TEMP TABLE ab1 AS SELECT * FROM sbq_receive('dlt_ab');
DO $$ BEGIN PERFORM sbq_abandon('dlt_ab', (SELECT lock_token FROM ab1), '{"first": true}'); END $$;
SELECT is(pg_temp.where_is((SELECT seq FROM s WHERE k = 'ab')), 'messages',
    'abandon below max_delivery_count leaves the row in sbq.messages');
CREATE TEMP TABLE ab2 AS SELECT * FROM sbq_receive('dlt_ab');
SAVEPOINT s_ab;
DO $$ BEGIN PERFORM sbq_abandon('dlt_ab', (SELECT lock_token FROM ab2), '{"p": "ab"}'); END $$;
SELECT pg_temp.where_is((SELECT seq FROM s WHERE k = 'ab')) AS where_in_sp \gset
ROLLBACK TO SAVEPOINT s_ab;
SELECT is(:'where_in_sp'::text, 'dead_letters',
    'abandon at max_delivery_count: inside the savepoint the row had moved to sbq.dead_letters');
SELECT is(pg_temp.where_is((SELECT seq FROM s WHERE k = 'ab')), 'messages',
    'abandon at max_delivery_count rolled back: the row is back in sbq.messages');
CREATE TEMP TABLE t_ab AS SELECT clock_timestamp() AS before;
SELECT lives_ok($$SELECT sbq_abandon('dlt_ab', (SELECT lock_token FROM ab2), '{"p": "ab"}')$$,
    'abandon at max_delivery_count: the lock survived the rollback');
SELECT * FROM pg_temp.moved('ab',
        'MaxDeliveryCountExceeded | Message could not be consumed after 2 delivery attempts. | dlt_ab'
        ' | delivery_count 2 | subqueue 1 | state 0 | lock none',
        (SELECT before FROM t_ab),
    ARRAY[
    'abandon at max_delivery_count: the row moved to sbq.dead_letters',
    'abandon at max_delivery_count: MaxDeliveryCountExceeded, source, delivery count 2, no lock',
    'abandon at max_delivery_count: dead_lettered_at is the time of the call',
    'abandon at max_delivery_count: properties, body and times as sent']);
SELECT is(pg_temp.props((SELECT seq FROM s WHERE k = 'ab')),
          '{"id": "ab", "p": "ab", "n": 1, "first": true}'::jsonb,
    'abandon at max_delivery_count: both abandons'' properties_to_modify are merged');

-- ------------------------------------------------ defer on the last allowed delivery
CREATE TEMP TABLE df AS SELECT * FROM sbq_receive('dlt_df');
CREATE TEMP TABLE t_df AS SELECT clock_timestamp() AS before;
SELECT lives_ok($$SELECT sbq_defer('dlt_df', (SELECT lock_token FROM df), '{"d": 1}')$$,
    'defer at max_delivery_count succeeds');
SELECT * FROM pg_temp.moved('df',
        'MaxDeliveryCountExceeded | Message could not be consumed after 1 delivery attempts. | dlt_df'
        ' | delivery_count 1 | subqueue 1 | state 0 | lock none',
        (SELECT before FROM t_df),
    ARRAY[
    'defer at max_delivery_count: the row moved to sbq.dead_letters',
    'defer at max_delivery_count: MaxDeliveryCountExceeded, active (not deferred) in the dead-letter queue',
    'defer at max_delivery_count: dead_lettered_at is the time of the call',
    'defer at max_delivery_count: properties, body and times as sent']);
SELECT is(pg_temp.props((SELECT seq FROM s WHERE k = 'df')), '{"id": "df", "p": "old", "n": 1, "d": 1}'::jsonb,
    'defer at max_delivery_count: properties_to_modify merged');

-- ------------------------------------------------ the dead-letter sub-queue works on sbq.dead_letters
CREATE TEMP TABLE o AS SELECT * FROM sbq_receive('dlt_ops', 2);
DO $$ BEGIN PERFORM sbq_deadletter('dlt_ops', lock_token, 'ops') FROM o; END $$;
SELECT is((SELECT count(*) FROM sbq.dead_letters d JOIN s ON s.seq = d.sequence_number AND s.k IN ('o1', 'o2')),
          2::bigint, 'DLQ: o1 and o2 are rows of sbq.dead_letters');
SELECT set_eq($$SELECT sequence_number, message_id, delivery_count, dead_letter_reason, dead_letter_source,
                       application_properties, body FROM sbq_peek('dlt_ops/$deadletterqueue', 10)$$,
              $$SELECT d.sequence_number, d.message_id, d.delivery_count, d.dead_letter_reason, d.dead_letter_source,
                       d.application_properties, d.body
                  FROM sbq.dead_letters d JOIN sbq.queues q USING (queue_id) WHERE q.name = 'dlt_ops'$$,
    'DLQ: peek of the dead-letter queue shows the rows of sbq.dead_letters');

CREATE TEMP TABLE q1 AS SELECT * FROM sbq_receive('dlt_ops/$deadletterqueue');
SELECT is((SELECT message_id || ':' || delivery_count FROM q1), 'o1:2',
    'DLQ receive: o1 with delivery_count 2');
SELECT is(pg_temp.where_is((SELECT seq FROM s WHERE k = 'o1')), 'dead_letters',
    'DLQ receive: the row stays in sbq.dead_letters');
SELECT is(pg_temp.lock_until((SELECT seq FROM s WHERE k = 'o1')), (SELECT locked_until FROM q1),
    'DLQ receive: the lock is that of the sbq.dead_letters row (a lease or in the row)');
SELECT is_empty($$SELECT 1 FROM sbq.messages m JOIN sbq.queues q USING (queue_id) WHERE q.name = 'dlt_ops'$$,
    'DLQ receive: sbq.messages holds no row of the queue');
SELECT lives_ok($$SELECT sbq_renew('dlt_ops/$deadletterqueue', (SELECT lock_token FROM q1))$$,
    'DLQ renew of the lock succeeds');
SELECT cmp_ok(pg_temp.lock_until((SELECT seq FROM s WHERE k = 'o1')), '>', (SELECT locked_until FROM q1),
    'DLQ renew: the lock of the sbq.dead_letters row is later');

SELECT lives_ok($$SELECT sbq_abandon('dlt_ops/$deadletterqueue', (SELECT lock_token FROM q1), '{"tries": 1}')$$,
    'DLQ abandon succeeds');
SELECT is(pg_temp.dl((SELECT seq FROM s WHERE k = 'o1')), 'ops | - | dlt_ops | delivery_count 2 | subqueue 1 | state 0 | lock none',
    'DLQ abandon: the sbq.dead_letters row is unlocked with delivery_count 2 stored, still a dead letter');
SELECT is(pg_temp.props((SELECT seq FROM s WHERE k = 'o1')), '{"id": "o1", "p": "old", "n": 1, "tries": 1}'::jsonb,
    'DLQ abandon: properties_to_modify merged into the sbq.dead_letters row');
SELECT is(pg_temp.lock_until((SELECT seq FROM s WHERE k = 'o1')), NULL,
    'DLQ abandon: no lease or row lock is left');

CREATE TEMP TABLE q2 AS SELECT * FROM sbq_receive('dlt_ops/$deadletterqueue');
SELECT is((SELECT message_id || ':' || delivery_count FROM q2), 'o1:3', 'DLQ: o1 received again, delivery_count 3');
SELECT lives_ok($$SELECT sbq_defer('dlt_ops/$deadletterqueue', (SELECT lock_token FROM q2))$$,
    'DLQ defer succeeds');
SELECT is(pg_temp.dl((SELECT seq FROM s WHERE k = 'o1')), 'ops | - | dlt_ops | delivery_count 3 | subqueue 1 | state 1 | lock none',
    'DLQ defer: the sbq.dead_letters row is deferred (state 1), unlocked, delivery_count 3');
SELECT is(pg_temp.where_is((SELECT seq FROM s WHERE k = 'o1')), 'dead_letters',
    'DLQ defer: the row stays in sbq.dead_letters');

CREATE TEMP TABLE q3 AS SELECT * FROM sbq_receive_deferred('dlt_ops/$deadletterqueue', ARRAY[(SELECT seq FROM s WHERE k = 'o1')]);
SELECT is((SELECT message_id || ':' || delivery_count || ':' || state FROM q3), 'o1:4:deferred',
    'DLQ receive_deferred returns the deferred dead letter');
SELECT is(pg_temp.lock_until((SELECT seq FROM s WHERE k = 'o1')), (SELECT locked_until FROM q3),
    'DLQ receive_deferred: the sbq.dead_letters row holds its lock');
SELECT is((SELECT state FROM sbq.dead_letters WHERE sequence_number = (SELECT seq FROM s WHERE k = 'o1')), 1::smallint,
    'DLQ receive_deferred: the sbq.dead_letters row stays deferred (state 1)');
SELECT lives_ok($$SELECT sbq_complete('dlt_ops/$deadletterqueue', (SELECT lock_token FROM q3))$$,
    'DLQ complete succeeds');
SELECT is(pg_temp.where_is((SELECT seq FROM s WHERE k = 'o1')), 'nowhere',
    'DLQ complete: the row is gone from sbq.dead_letters (and is not in sbq.messages)');

CREATE TEMP TABLE q4 AS SELECT * FROM sbq_receive('dlt_ops/$deadletterqueue', 5, receive_mode => 'receive_and_delete');
SELECT is((SELECT array_agg(message_id) FROM q4), ARRAY['o2'], 'DLQ receive_and_delete returns o2');
SELECT is(pg_temp.where_is((SELECT seq FROM s WHERE k = 'o2')), 'nowhere',
    'DLQ receive_and_delete: the row is gone from sbq.dead_letters');
SELECT is((SELECT dead_letter_count FROM sbq_queue_stats WHERE queue = 'dlt_ops'), 0::bigint,
    'DLQ: no dead letter of dlt_ops is counted');

-- ------------------------------------------------ resubmit
CREATE TEMP TABLE rs AS SELECT * FROM sbq_receive('dlt_rs', 3);
DO $$ BEGIN PERFORM sbq_deadletter('dlt_rs', lock_token, 'again', 'resubmit me') FROM rs; END $$;
SELECT is((SELECT array_agg(pg_temp.where_is(seq) ORDER BY k) FROM s WHERE k IN ('r1', 'r2', 'r3')),
          ARRAY['dead_letters', 'dead_letters', 'dead_letters'], 'resubmit: r1, r2, r3 are dead letters');
CREATE TEMP TABLE rs1 AS SELECT sbq_resubmit('dlt_rs', ARRAY[(SELECT seq FROM s WHERE k = 'r1')]) AS n,
                                clock_timestamp() AS at;
SELECT is((SELECT n FROM rs1), 1, 'resubmit of r1 returns 1');
SELECT is(pg_temp.where_is((SELECT seq FROM s WHERE k = 'r1')), 'nowhere',
    'resubmit: r1''s row left sbq.dead_letters, and its old sequence number is not in sbq.messages');
CREATE TEMP TABLE nr1 AS SELECT m.* FROM sbq.messages m JOIN sbq.queues q USING (queue_id)
                          WHERE q.name = 'dlt_rs' AND m.message_id = 'r1';
SELECT is((SELECT count(*) FROM nr1), 1::bigint, 'resubmit: one new row of r1 in sbq.messages');
SELECT cmp_ok((SELECT sequence_number FROM nr1), '>', (SELECT max(seq) FROM s),
    'resubmit: the new row has a new, higher sequence number');
SELECT is((SELECT format('subqueue %s, state %s, delivery_count %s, lock %s, reason %s, description %s, source %s',
                         subqueue, state, delivery_count, coalesce(lock_token::text, locked_until::text, 'none'),
                         coalesce(dead_letter_reason, '-'), coalesce(dead_letter_error_description, '-'),
                         coalesce(dead_letter_source, '-')) FROM nr1),
          'subqueue 0, state 0, delivery_count 0, lock none, reason -, description -, source -',
    'resubmit: the new row is an active first delivery, reasons cleared');
SELECT is((SELECT row(message_id, correlation_id, subject, content_type, reply_to, reply_to_session_id,
                      to_address, time_to_live, application_properties, body)::text FROM nr1),
          (SELECT row(message_id, correlation_id, subject, content_type, reply_to, reply_to_session_id,
                      to_address, time_to_live, application_properties, body)::text FROM sent
            WHERE sequence_number = (SELECT seq FROM s WHERE k = 'r1')),
    'resubmit: the new row carries the message''s properties and body');
SELECT ok((SELECT enqueued_time <= (SELECT at FROM rs1) AND enqueued_time > (SELECT max(enqueued_time) FROM sent)
                  AND expires_at = enqueued_time + interval '1 hour' FROM nr1),
    'resubmit: the new row is enqueued now and expires its time to live later');
SELECT is((SELECT array_agg(pg_temp.where_is(seq) ORDER BY k) FROM s WHERE k IN ('r2', 'r3')),
          ARRAY['dead_letters', 'dead_letters'], 'resubmit: r2 and r3 are still rows of sbq.dead_letters');
SELECT is(sbq_resubmit('dlt_rs/$deadletterqueue'), 2, 'resubmit of the rest returns 2');
SELECT is_empty($$SELECT 1 FROM sbq.dead_letters d JOIN sbq.queues q USING (queue_id) WHERE q.name = 'dlt_rs'$$,
    'resubmit: no row of dlt_rs is left in sbq.dead_letters');
SELECT is((SELECT array_agg(m.message_id ORDER BY m.sequence_number) FROM sbq.messages m JOIN sbq.queues q USING (queue_id)
            WHERE q.name = 'dlt_rs' AND m.sequence_number > (SELECT max(seq) FROM s)),
          ARRAY['r1', 'r2', 'r3'], 'resubmit: sbq.messages holds the three as new rows, in their old order');
SELECT is((SELECT array_agg(message_id || ':' || delivery_count ORDER BY sequence_number) FROM sbq_receive('dlt_rs', 5)),
          ARRAY['r1:1', 'r2:1', 'r3:1'], 'resubmit: the new messages are received as first deliveries');

-- ------------------------------------------------ purge
CREATE TEMP TABLE pg AS SELECT * FROM sbq_receive('dlt_pg', 2);
DO $$ BEGIN PERFORM sbq_deadletter('dlt_pg', lock_token) FROM pg; END $$;
CREATE TEMP TABLE others AS SELECT count(*) AS n FROM sbq.dead_letters d JOIN sbq.queues q USING (queue_id)
                             WHERE q.name <> 'dlt_pg';
SELECT is(sbq_purge_queue('dlt_pg'), 1::bigint, 'purge of the queue removes its one message');
SELECT is((SELECT array_agg(pg_temp.where_is(seq) ORDER BY k) FROM s WHERE k IN ('p1', 'p2', 'p3')),
          ARRAY['dead_letters', 'dead_letters', 'nowhere'],
    'purge of the queue leaves its dead letters in sbq.dead_letters');
INSERT INTO s VALUES ('p4', pg_temp.send('dlt_pg', 'p4'));
SELECT is(sbq_purge_queue('dlt_pg/$deadletterqueue'), 2::bigint, 'purge of the dead-letter queue removes two');
SELECT is_empty($$SELECT 1 FROM sbq.dead_letters d JOIN sbq.queues q USING (queue_id) WHERE q.name = 'dlt_pg'$$,
    'purge of the dead-letter queue: no row of dlt_pg is left in sbq.dead_letters');
SELECT is(pg_temp.where_is((SELECT seq FROM s WHERE k = 'p4')), 'messages',
    'purge of the dead-letter queue leaves the queue''s messages');
SELECT is((SELECT count(*) FROM sbq.dead_letters d JOIN sbq.queues q USING (queue_id) WHERE q.name <> 'dlt_pg'),
          (SELECT n FROM others), 'purge of the dead-letter queue leaves other queues'' dead letters');

-- ------------------------------------------------ delete queue
CREATE TEMP TABLE del AS SELECT * FROM sbq_receive('dlt_del', 3);
DO $$ BEGIN PERFORM sbq_deadletter('dlt_del', lock_token) FROM del WHERE message_id IN ('e1', 'e2'); END $$;
CREATE TEMP TABLE del2 AS SELECT * FROM sbq_receive('dlt_del/$deadletterqueue');
CREATE TEMP TABLE delq AS SELECT queue_id FROM sbq.queues WHERE name = 'dlt_del';
SELECT is((SELECT format('%s in messages, %s in dead_letters',
                         (SELECT count(*) FROM sbq.messages WHERE queue_id = (SELECT queue_id FROM delq)),
                         (SELECT count(*) FROM sbq.dead_letters WHERE queue_id = (SELECT queue_id FROM delq)))),
          '2 in messages, 2 in dead_letters', 'delete queue: before, rows in both tables (some locked)');
SELECT lives_ok($$SELECT sbq_delete_queue('dlt_del')$$, 'delete queue succeeds');
SELECT is((SELECT format('%s in messages, %s in dead_letters',
                         (SELECT count(*) FROM sbq.messages WHERE queue_id = (SELECT queue_id FROM delq)),
                         (SELECT count(*) FROM sbq.dead_letters WHERE queue_id = (SELECT queue_id FROM delq)))),
          '0 in messages, 0 in dead_letters', 'delete queue: no row of the queue is left in either table');

SELECT is(pg_temp.stats_vs_rows(), 'all equal',
    'stats: dead_letter_count is the number of each queue''s rows in sbq.dead_letters');

-- ------------------------------------------------ t = 5.5: locks of 5 s and times to live of 4 s ran out
DO $$ BEGIN PERFORM pg_sleep(5.5); END $$;

-- lock expiry on the last allowed delivery, found by a peek-lock receive
SAVEPOINT s_lr;
SELECT count(*) AS lr_got FROM sbq_receive('dlt_lr') \gset
SELECT pg_temp.where_is((SELECT seq FROM s WHERE k = 'lr')) AS where_in_sp \gset
ROLLBACK TO SAVEPOINT s_lr;
SELECT is(:'where_in_sp'::text, 'dead_letters',
    'lock expiry (receive): inside the savepoint the receive had moved the row to sbq.dead_letters');
SELECT is(pg_temp.where_is((SELECT seq FROM s WHERE k = 'lr')), 'messages',
    'lock expiry (receive) rolled back: the row is back in sbq.messages');
CREATE TEMP TABLE t_lr AS SELECT clock_timestamp() AS before;
SELECT is_empty($$SELECT * FROM sbq_receive('dlt_lr', 5)$$,
    'lock expiry (receive): the receive hands out nothing');
SELECT * FROM pg_temp.moved('lr',
        'MaxDeliveryCountExceeded | Message could not be consumed after 2 delivery attempts. | dlt_lr'
        ' | delivery_count 2 | subqueue 1 | state 0 | lock none',
        (SELECT before FROM t_lr),
    ARRAY[
    'lock expiry (receive): the row moved to sbq.dead_letters',
    'lock expiry (receive): MaxDeliveryCountExceeded, delivery count 2, no lock',
    'lock expiry (receive): dead_lettered_at is the time of the receive',
    'lock expiry (receive): properties, body and times as sent']);
SELECT is(pg_temp.props((SELECT seq FROM s WHERE k = 'lr')), (SELECT application_properties FROM sent
            WHERE sequence_number = (SELECT seq FROM s WHERE k = 'lr')),
    'lock expiry (receive): application properties as sent');

-- found by a receive_and_delete (with locks in shared memory: its sweep of the queue)
SELECT is_empty($$SELECT * FROM sbq_receive('dlt_ld', 5, receive_mode => 'receive_and_delete')$$,
    'lock expiry (receive_and_delete): nothing is handed out');
SELECT * FROM pg_temp.moved('ld',
        'MaxDeliveryCountExceeded | Message could not be consumed after 1 delivery attempts. | dlt_ld'
        ' | delivery_count 1 | subqueue 1 | state 0 | lock none',
        NULL,
    ARRAY[
    'lock expiry (receive_and_delete): the row moved to sbq.dead_letters, not deleted',
    'lock expiry (receive_and_delete): MaxDeliveryCountExceeded, delivery count 1, no lock',
    'lock expiry (receive_and_delete): properties, body and times as sent']);

-- time to live passed, found by a receive
SELECT is_empty($$SELECT * FROM sbq_receive('dlt_tr', 5)$$, 'TTL (receive): nothing is handed out');
SELECT * FROM pg_temp.moved('tr',
        'TTLExpiredException | The message expired and was dead-lettered. | dlt_tr'
        ' | delivery_count 0 | subqueue 1 | state 0 | lock none',
        NULL,
    ARRAY[
    'TTL (receive): the row moved to sbq.dead_letters',
    'TTL (receive): TTLExpiredException, never delivered, no lock',
    'TTL (receive): properties, body and times as sent']);

-- time to live passed under a lock, found by abandon and defer
SELECT lives_ok($$SELECT sbq_abandon('dlt_ta', (SELECT lock_token FROM ta WHERE message_id = 'ta_ab'), '{"a": 2}')$$,
    'TTL (abandon): abandon of the expired message succeeds');
SELECT is(pg_temp.dl((SELECT seq FROM s WHERE k = 'ta_ab')),
          'TTLExpiredException | The message expired and was dead-lettered. | dlt_ta'
          ' | delivery_count 1 | subqueue 1 | state 0 | lock none',
    'TTL (abandon): the row moved to sbq.dead_letters with TTLExpiredException, delivery count 1');
SELECT is(pg_temp.props((SELECT seq FROM s WHERE k = 'ta_ab')), '{"id": "ta_ab", "p": "old", "n": 1, "a": 2}'::jsonb,
    'TTL (abandon): properties_to_modify merged');
SELECT lives_ok($$SELECT sbq_defer('dlt_ta', (SELECT lock_token FROM ta WHERE message_id = 'ta_df'))$$,
    'TTL (defer): defer of the expired message succeeds');
SELECT is(pg_temp.dl((SELECT seq FROM s WHERE k = 'ta_df')),
          'TTLExpiredException | The message expired and was dead-lettered. | dlt_ta'
          ' | delivery_count 1 | subqueue 1 | state 0 | lock none',
    'TTL (defer): the row moved to sbq.dead_letters with TTLExpiredException, active there');
SELECT is((SELECT array_agg(pg_temp.where_is(seq) ORDER BY k) FROM s WHERE k IN ('ta_ab', 'ta_df')),
          ARRAY['dead_letters', 'dead_letters'], 'TTL (abandon, defer): neither row is left in sbq.messages');
SELECT is(pg_temp.payload((SELECT seq FROM s WHERE k = 'ta_df'), 'sbq.dead_letters'),
          pg_temp.payload((SELECT seq FROM s WHERE k = 'ta_df'), 'sent'),
    'TTL (defer): properties, body and times as sent');

-- the lock of a dead letter ran out: a receive from the dead-letter queue takes it over
CREATE TEMP TABLE dy3 AS SELECT * FROM sbq_receive('dlt_dy/$deadletterqueue');
SELECT is((SELECT message_id || ':' || delivery_count FROM dy3), 'dy:3',
    'DLQ lock expiry (receive): the dead letter is delivered again, as its 3rd delivery');
SELECT is(pg_temp.where_is((SELECT seq FROM s WHERE k = 'dy')), 'dead_letters',
    'DLQ lock expiry (receive): its row stays in sbq.dead_letters');
SELECT is(pg_temp.lock_until((SELECT seq FROM s WHERE k = 'dy')), (SELECT locked_until FROM dy3),
    'DLQ lock expiry (receive): the sbq.dead_letters row holds the new lock');
SELECT lives_ok($$SELECT sbq_abandon('dlt_dy/$deadletterqueue', (SELECT lock_token FROM dy3))$$,
    'DLQ lock expiry (receive): the new lock abandons');
SELECT is(pg_temp.dl((SELECT seq FROM s WHERE k = 'dy')), 'dy | - | dlt_dy | delivery_count 3 | subqueue 1 | state 0 | lock none',
    'DLQ lock expiry (receive): the sbq.dead_letters row has delivery_count 3 stored, unlocked');

-- ... and a resubmit moves it back to the queue
SELECT is(sbq_resubmit('dlt_dz'), 1, 'DLQ lock expiry (resubmit): the dead letter whose lock ran out is resubmitted');
SELECT is(pg_temp.where_is((SELECT seq FROM s WHERE k = 'dz')), 'nowhere',
    'DLQ lock expiry (resubmit): its row left sbq.dead_letters');
SELECT is((SELECT format('%s %s %s', m.subqueue, m.state, m.delivery_count) FROM sbq.messages m JOIN sbq.queues q USING (queue_id)
            WHERE q.name = 'dlt_dz' AND m.message_id = 'dz'), '0 0 0',
    'DLQ lock expiry (resubmit): a new row in sbq.messages, active, never delivered');
SELECT is(sbq.lease_until((SELECT seq FROM s WHERE k = 'dz')), NULL,
    'DLQ lock expiry (resubmit): no lease is left on the old sequence number');

-- found by sbq_maintain: the locks of lm (with locks in shared memory: the lease sweep) and
-- lq (deferred, locked in the row by receive_deferred), the times to live of tm and tq (deferred)
SAVEPOINT s_mt;
SELECT sbq_maintain() AS mt_in_sp \gset
SELECT string_agg(pg_temp.where_is(seq), ' ' ORDER BY k) AS where_in_sp FROM s WHERE k IN ('lm', 'lq', 'tm', 'tq') \gset
ROLLBACK TO SAVEPOINT s_mt;
SELECT is(:'where_in_sp'::text, 'dead_letters dead_letters dead_letters dead_letters',
    'maintain: inside the savepoint lm, lq, tm and tq had moved to sbq.dead_letters');
SELECT is((SELECT array_agg(pg_temp.where_is(seq) ORDER BY k) FROM s WHERE k IN ('lm', 'lq', 'tm', 'tq')),
          ARRAY['messages', 'messages', 'messages', 'messages'],
    'maintain rolled back: lm, lq, tm and tq are back in sbq.messages');
SELECT is((SELECT array_agg(format('%s %s', m.message_id, m.state) ORDER BY m.message_id) FROM sbq.messages m
            JOIN s ON s.seq = m.sequence_number AND s.k IN ('lq', 'tq')),
          ARRAY['lq 1', 'tq 1'], 'maintain rolled back: lq and tq are deferred again');
CREATE TEMP TABLE t_mt AS SELECT clock_timestamp() AS before;
CREATE TEMP TABLE mt AS SELECT sbq_maintain() AS j;
SELECT is((SELECT format('dead_lettered %s, expired_dead_lettered %s', j ->> 'dead_lettered', j ->> 'expired_dead_lettered')
             FROM mt), 'dead_lettered 2, expired_dead_lettered 2',
    'maintain: after the rolled-back pass it dead-letters lm, lq (locks) and tm, tq (times to live) again');
SELECT is((SELECT array_agg(pg_temp.where_is(seq) ORDER BY k) FROM s WHERE k IN ('lm', 'lq', 'tm', 'tq')),
          ARRAY['dead_letters', 'dead_letters', 'dead_letters', 'dead_letters'],
    'maintain: lm, lq, tm and tq moved to sbq.dead_letters');
SELECT is(pg_temp.dl((SELECT seq FROM s WHERE k = 'lm')),
          'MaxDeliveryCountExceeded | Message could not be consumed after 1 delivery attempts. | dlt_lm'
          ' | delivery_count 1 | subqueue 1 | state 0 | lock none',
    'lock expiry (maintain): MaxDeliveryCountExceeded, delivery count 1, no lock');
SELECT is(pg_temp.dl((SELECT seq FROM s WHERE k = 'lq')),
          'MaxDeliveryCountExceeded | Message could not be consumed after 2 delivery attempts. | dlt_lq'
          ' | delivery_count 2 | subqueue 1 | state 0 | lock none',
    'lock expiry of a deferred message (maintain): MaxDeliveryCountExceeded, active in the dead-letter queue, no lock');
SELECT is(pg_temp.dl((SELECT seq FROM s WHERE k = 'tm')),
          'TTLExpiredException | The message expired and was dead-lettered. | dlt_tm'
          ' | delivery_count 0 | subqueue 1 | state 0 | lock none',
    'TTL (maintain): TTLExpiredException, never delivered, no lock');
SELECT is(pg_temp.dl((SELECT seq FROM s WHERE k = 'tq')),
          'TTLExpiredException | The message expired and was dead-lettered. | dlt_tq'
          ' | delivery_count 1 | subqueue 1 | state 0 | lock none',
    'TTL of a deferred message (maintain): TTLExpiredException, active in the dead-letter queue');
SELECT ok((SELECT bool_and(dead_lettered_at BETWEEN (SELECT before FROM t_mt) AND clock_timestamp())
             FROM sbq.dead_letters d JOIN s ON s.seq = d.sequence_number AND s.k IN ('lm', 'lq', 'tm', 'tq')),
    'maintain: dead_lettered_at is the time of the pass');
SELECT is((SELECT array_agg(pg_temp.payload(seq, 'sbq.dead_letters') ORDER BY k) FROM s WHERE k IN ('lm', 'lq', 'tm', 'tq')),
          (SELECT array_agg(pg_temp.payload(seq, 'sent') ORDER BY k) FROM s WHERE k IN ('lm', 'lq', 'tm', 'tq')),
    'maintain: properties, body and times as sent');
SELECT is((SELECT array_agg(pg_temp.props(seq) ORDER BY k) FROM s WHERE k IN ('lm', 'lq', 'tm', 'tq')),
          (SELECT array_agg(application_properties ORDER BY message_id) FROM sent WHERE message_id IN ('lm', 'lq', 'tm', 'tq')),
    'maintain: application properties as sent');

-- the lock of a dead letter ran out: it stays in sbq.dead_letters
SELECT is(pg_temp.where_is((SELECT seq FROM s WHERE k = 'dx')), 'dead_letters',
    'DLQ lock expiry: the dead letter stays in sbq.dead_letters');
SELECT ok(coalesce(pg_temp.lock_until((SELECT seq FROM s WHERE k = 'dx')) <= clock_timestamp(), true),
    'DLQ lock expiry: it holds no valid lock');
CREATE TEMP TABLE dx3 AS SELECT * FROM sbq_receive('dlt_dx/$deadletterqueue');
SELECT is((SELECT message_id || ':' || delivery_count FROM dx3), 'dx:3',
    'DLQ lock expiry: received again from the dead-letter queue as its 3rd delivery');
SELECT lives_ok($$SELECT sbq_complete('dlt_dx/$deadletterqueue', (SELECT lock_token FROM dx3))$$,
    'DLQ lock expiry: the new lock completes');
SELECT is(pg_temp.where_is((SELECT seq FROM s WHERE k = 'dx')), 'nowhere', 'DLQ lock expiry: dx is gone');

-- ------------------------------------------------ all of it
SELECT is(pg_temp.stats_vs_rows(), 'all equal',
    'stats: dead_letter_count is the number of each queue''s rows in sbq.dead_letters');
SELECT is((SELECT array_agg(q.name || ':' || n ORDER BY q.name)
             FROM (SELECT queue_id, count(*) AS n FROM sbq.dead_letters GROUP BY queue_id) d
             JOIN sbq.queues q USING (queue_id)),
          ARRAY['dlt_ab:1', 'dlt_df:1', 'dlt_dy:1', 'dlt_exp:1', 'dlt_ld:1', 'dlt_lm:1', 'dlt_lq:1', 'dlt_lr:1', 'dlt_ta:2', 'dlt_tm:1',
                'dlt_tq:1', 'dlt_tr:1'],
    'sbq.dead_letters holds the dead letters left, queue by queue');
SELECT is_empty($$SELECT 1 FROM sbq.messages m JOIN s ON s.seq = m.sequence_number
                   WHERE s.k NOT IN ('p4')$$,
    'sbq.messages holds none of the messages sent except p4 under their first sequence numbers');

SELECT * FROM finish();
ROLLBACK;
