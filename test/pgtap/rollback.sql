-- sbqueue pgTAP: send, receive, complete and abandon roll back with the caller's transaction (no sleeps)
-- Values made inside a rolled-back savepoint are carried out in psql variables (\gset).
BEGIN;
SELECT plan(16);

DO $$ BEGIN PERFORM sbq_create_queue('t06'); END $$;

-- ------------------------------------------------------------ send
SAVEPOINT s_send;
SELECT sbq_send('t06', 'gone'::text, message_id => 'gone') AS gone_seq \gset
ROLLBACK TO SAVEPOINT s_send;

SELECT is_empty($$SELECT * FROM sbq_peek('t06', 10)$$,
    'R12.1: a rolled-back send leaves no message (peek)');
SELECT is_empty($$SELECT * FROM sbq_receive('t06', 10)$$,
    'R12.1: a rolled-back send leaves no message (receive)');
SELECT is((SELECT active_count + sent FROM sbq_queue_stats WHERE queue = 't06'), 0::bigint,
    'R12.1 (API Observability): a rolled-back send leaves no trace in sbq_queue_stats');

CREATE TEMP TABLE k1 AS SELECT sbq_send('t06', 'kept'::text, message_id => 'k1') AS seq;
SELECT cmp_ok((SELECT seq FROM k1), '>', :gone_seq::bigint,
    'R1.12 (API: sequence numbers are never reused): the next send gets a higher number than the rolled-back one');

-- ------------------------------------------------------------ receive
SAVEPOINT s_recv;
SELECT lock_token AS recv_token, delivery_count AS recv_dc FROM sbq_receive('t06') \gset
ROLLBACK TO SAVEPOINT s_recv;

SELECT is(:'recv_dc'::integer, 1,
    'R3.1: the receive inside the savepoint returned the message with delivery_count 1');
CREATE TEMP TABLE r2 AS SELECT * FROM sbq_receive('t06');
SELECT is((SELECT message_id FROM r2), 'k1',
    'R12.1: after a rolled-back receive the message is available again');
SELECT is((SELECT delivery_count FROM r2), 1,
    'R3.5 (API: a receive whose transaction rolls back does not count): delivery_count is still 1');
SELECT throws_ok(format('SELECT sbq_complete(%L, %L::uuid)', 't06', :'recv_token'), 'SB002', NULL,
    'R2.9: the token of a rolled-back receive is not a lock (SB002)');

-- ------------------------------------------------------------ complete
SAVEPOINT s_complete;
DO $$ BEGIN PERFORM sbq_complete('t06', (SELECT lock_token FROM r2)); END $$;
SELECT count(*) AS peek_in_sp FROM sbq_peek('t06', 10) \gset
ROLLBACK TO SAVEPOINT s_complete;

SELECT is(:peek_in_sp::bigint, 0::bigint,
    'R4.1: inside the savepoint the completed message was gone');
SELECT is((SELECT array_agg(message_id) FROM sbq_peek('t06', 10)), ARRAY['k1'],
    'R12.1: after a rolled-back complete the message is still in the queue');
SELECT is_empty($$SELECT * FROM sbq_receive('t06')$$,
    'R12.1: after a rolled-back complete the message is still locked');
SELECT lives_ok($$SELECT sbq_complete('t06', (SELECT lock_token FROM r2))$$,
    'R12.1: after a rolled-back complete its lock token is still valid');
SELECT is_empty($$SELECT * FROM sbq_peek('t06', 10)$$,
    'R4.1: the complete after the rollback removed the message');

-- ------------------------------------------------------------ abandon
DO $$ BEGIN PERFORM sbq_send('t06', 'k2'::text, message_id => 'k2'); END $$;
CREATE TEMP TABLE r3 AS SELECT * FROM sbq_receive('t06');
SAVEPOINT s_abandon;
DO $$ BEGIN PERFORM sbq_abandon('t06', (SELECT lock_token FROM r3)); END $$;
ROLLBACK TO SAVEPOINT s_abandon;
SELECT is_empty($$SELECT * FROM sbq_receive('t06')$$,
    'R12.1: after a rolled-back abandon the message is still locked');
SELECT lives_ok($$SELECT sbq_abandon('t06', (SELECT lock_token FROM r3))$$,
    'R12.1: after a rolled-back abandon its lock token is still valid');
SELECT is((SELECT delivery_count FROM sbq_receive('t06')), 2,
    'R3.2, R12.1: only the abandon that committed counted: the next delivery reports 2');

SELECT * FROM finish();
ROLLBACK;
