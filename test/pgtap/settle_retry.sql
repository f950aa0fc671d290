-- sbqueue pgTAP: a queue's retry back-off for abandoned messages (0.9).
-- sbq_create_queue / sbq_update_queue take retry_delay, retry_backoff and
-- max_retry_delay. An abandon in the main queue that gives no delay of its own waits
-- retry_delay before the message may be received again; with retry_backoff the delay
-- doubles with each delivery (retry_delay * 2^(delivery_count - 1)), at most
-- max_retry_delay. An explicit delay ('0' too) wins; defer and the dead-letter
-- sub-queue wait nothing; the last allowed delivery dead-letters at once. A queue that
-- requires sessions cannot have one (22023).
-- Sleeps: about 3 s in all (back-off of 0.5 s, 1 s, then the 1.2 s cap).
-- Time checks use the wall clock (clock_timestamp()): a hold must end between the
-- abandon's start and end plus the delay.
BEGIN;
SELECT plan(42);

\ir bad_input_setup.psql

-- when the last marked call ran: the wall clock just before and just after it
CREATE TEMP TABLE mark (t0 timestamptz, t1 timestamptz);
CREATE FUNCTION pg_temp.marked(_sql text) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    t0 timestamptz := clock_timestamp();
BEGIN
    EXECUTE _sql;
    DELETE FROM mark;
    INSERT INTO mark VALUES (t0, clock_timestamp());
END $$;

-- whether the message of _q with body _body is held back (no lock token) until the
-- marked call's time plus _d
CREATE FUNCTION pg_temp.held_for(_q text, _body text, _d interval) RETURNS boolean LANGUAGE sql AS $$
    SELECT p.lock_token IS NULL AND p.locked_until BETWEEN m.t0 + _d AND m.t1 + _d
      FROM sbq_peek(_q, 10) p, mark m WHERE convert_from(p.body, 'UTF8') = _body
$$;

-- receive the one message of _q (waiting up to 5 s), abandon it without a delay
-- (marked); returns its delivery count
CREATE FUNCTION pg_temp.fail_once(_q text) RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
    m record;
BEGIN
    SELECT * INTO m FROM sbq_receive(_q, 1, '5 seconds');
    IF m.lock_token IS NULL THEN
        RAISE EXCEPTION 'fixture: nothing to receive in %', _q;
    END IF;
    PERFORM pg_temp.marked(format('SELECT sbq_abandon(%L, %L::uuid)', _q, m.lock_token));
    RETURN m.delivery_count;
END $$;

-- ------------------------------------------------------------ the properties
SELECT is((SELECT row(retry_delay, retry_backoff, max_retry_delay)::text
             FROM sbq_create_queue('sr_fixed', retry_delay => '2 seconds')),
          '(00:00:02,f,)', 'RB1: sbq_create_queue takes retry_delay; retry_backoff is off, no cap');
SELECT is((SELECT row(retry_delay, retry_backoff, max_retry_delay)::text FROM sbq_get_queue('sr_fixed')),
          '(00:00:02,f,)', 'RB2: sbq_get_queue shows them');
SELECT is((SELECT row(retry_delay, retry_backoff, max_retry_delay)::text FROM sbq_queues WHERE queue = 'sr_fixed'),
          '(00:00:02,f,)', 'RB3: so does sbq_queues');
SELECT is((SELECT row(retry_delay, retry_backoff, max_retry_delay)::text
             FROM sbq_create_queue('sr_plain')),
          '(,f,)', 'RB4: by default a queue has none (as Service Bus)');
SELECT is((SELECT row(retry_delay, retry_backoff, max_retry_delay)::text
             FROM sbq_create_queue('sr_back', retry_delay => '0.5 seconds', retry_backoff => true,
                                   max_retry_delay => '1.2 seconds', max_delivery_count => 5)),
          '(00:00:00.5,t,00:00:01.2)', 'RB5: back-off with a cap');

-- bad values: 22023, nothing changes
SELECT * FROM pg_temp.bad('RB6', 'a negative retry_delay is 22023',
    $$SELECT sbq_create_queue('sr_bad', retry_delay => '-1 second')$$, '22023');
SELECT * FROM pg_temp.bad('RB7', 'a retry_delay over a year is 22023',
    $$SELECT sbq_create_queue('sr_bad', retry_delay => '366 days')$$, '22023');
SELECT * FROM pg_temp.bad('RB8', 'a negative max_retry_delay is 22023',
    $$SELECT sbq_create_queue('sr_bad', max_retry_delay => '-1 second')$$, '22023');
SELECT * FROM pg_temp.bad('RB9', 'a queue that requires sessions cannot have a retry_delay',
    $$SELECT sbq_create_queue('sr_bad', requires_session => true, retry_delay => '1 second')$$, '22023');
SELECT lives_ok($$SELECT sbq_create_queue('sr_sess', requires_session => true, retry_delay => '0')$$,
          'RB10: ... a retry_delay of 0 (none) it may');
SELECT * FROM pg_temp.bad('RB11', 'nor can an update give it one',
    $$SELECT sbq_update_queue('sr_sess', retry_delay => '1 second')$$, '22023');
SELECT * FROM pg_temp.bad('RB12', 'an update is checked as a create',
    $$SELECT sbq_update_queue('sr_fixed', retry_delay => '-1 second')$$, '22023');

-- ------------------------------------------------------------ a fixed delay
DO $$ BEGIN PERFORM sbq_send_batch('sr_fixed', ARRAY['f1', 'f2', 'f3', 'f4']); END $$;
CREATE TEMP TABLE f AS SELECT * FROM sbq_receive('sr_fixed', 4);
SELECT lives_ok($$SELECT pg_temp.marked($q$SELECT sbq_abandon('sr_fixed', (SELECT lock_token FROM f WHERE body = 'f1'))$q$)$$,
                'setup: f1 abandoned without a delay of its own');
SELECT ok(pg_temp.held_for('sr_fixed', 'f1', '2 seconds'), 'RB13: it is held back for the queue''s retry_delay (2 s)');
SELECT is_empty($$SELECT * FROM sbq_receive('sr_fixed')$$, 'RB14: no receive gets it meanwhile');
SELECT lives_ok($$SELECT sbq_abandon('sr_fixed', (SELECT lock_token FROM f WHERE body = 'f2'), delay => '0')$$,
                'setup: f2 abandoned with a delay of 0');
CREATE TEMP TABLE f2 AS SELECT * FROM sbq_receive('sr_fixed', 4);
SELECT is((SELECT array_agg(convert_from(body, 'UTF8')) FROM f2), ARRAY['f2'],
          'RB15: an explicit delay of 0 wins: f2 is received again at once');
SELECT lives_ok($$SELECT pg_temp.marked($q$SELECT * FROM sbq_settle('sr_fixed',
                      ARRAY(SELECT lock_token FROM f WHERE body = 'f3'), 'abandon')$q$)$$,
                'setup: f3 abandoned through sbq_settle, no delay given');
SELECT ok(pg_temp.held_for('sr_fixed', 'f3', '2 seconds'),
          'RB16: sbq_settle''s abandon is held back by the queue''s retry_delay too');
SELECT lives_ok($$SELECT sbq_defer('sr_fixed', (SELECT lock_token FROM f WHERE body = 'f4'))$$,
                'setup: f4 deferred');
SELECT is((SELECT row(state, locked_until IS NULL)::text FROM sbq_peek('sr_fixed', 10)
            WHERE convert_from(body, 'UTF8') = 'f4'),
          '(deferred,t)', 'RB17: a defer waits nothing');
-- a deferred message received by its number and abandoned stays deferred, and waits
-- nothing: only its number reaches it
CREATE TEMP TABLE fd AS SELECT * FROM sbq_receive_deferred('sr_fixed',
    ARRAY(SELECT sequence_number FROM f WHERE body = 'f4'));
SELECT lives_ok($$SELECT sbq_abandon('sr_fixed', (SELECT lock_token FROM fd))$$,
                'setup: f4, received by its number, abandoned without a delay');
SELECT is((SELECT row(state, locked_until IS NULL)::text FROM sbq_peek('sr_fixed', 10)
            WHERE convert_from(body, 'UTF8') = 'f4'),
          '(deferred,t)', 'RB17a: an abandoned deferred message stays deferred and is not held back');
CREATE TEMP TABLE fd2 AS SELECT * FROM sbq_receive_deferred('sr_fixed',
    ARRAY(SELECT sequence_number FROM f WHERE body = 'f4'));
SELECT is((SELECT count(*) FROM fd2), 1::bigint, 'RB17b: ... so its number reaches it again at once');
-- the dead-letter sub-queue has no retry back-off
SELECT lives_ok($$SELECT sbq_deadletter('sr_fixed', (SELECT lock_token FROM fd2))$$,
                'setup: f4 dead-lettered');
SELECT lives_ok($$SELECT sbq_abandon('sr_fixed/$deadletterqueue',
                      (SELECT lock_token FROM sbq_receive('sr_fixed/$deadletterqueue')))$$,
                'setup: the dead letter abandoned');
SELECT is((SELECT count(*) FROM sbq_receive('sr_fixed/$deadletterqueue')), 1::bigint,
          'RB18: a dead letter abandoned is received again at once');
-- turned off by an update
SELECT is((SELECT retry_delay FROM sbq_update_queue('sr_fixed', retry_delay => '0')), '0'::interval,
          'RB19: sbq_update_queue sets retry_delay to 0');
SELECT lives_ok($$SELECT sbq_abandon('sr_fixed', (SELECT lock_token FROM f2))$$,
                'setup: f2 abandoned again');
SELECT is((SELECT array_agg(convert_from(body, 'UTF8')) FROM sbq_receive('sr_fixed', 4)), ARRAY['f2'],
          'RB20: ... and an abandon is available at once again (f1 and f3 still wait)');

-- ------------------------------------------------------------ back-off
DO $$ BEGIN PERFORM sbq_send('sr_back', 'b'); END $$;
SELECT is(pg_temp.fail_once('sr_back'), 1, 'setup: delivery 1 abandoned');
SELECT ok(pg_temp.held_for('sr_back', 'b', '0.5 seconds'), 'RB21: after delivery 1 the message waits retry_delay (0.5 s)');
SELECT is(pg_temp.fail_once('sr_back'), 2, 'setup: delivery 2 abandoned (received after the wait)');
SELECT ok(pg_temp.held_for('sr_back', 'b', '1 second'), 'RB22: after delivery 2 it waits twice that (1 s)');
SELECT is(pg_temp.fail_once('sr_back'), 3, 'setup: delivery 3 abandoned');
SELECT ok(pg_temp.held_for('sr_back', 'b', '1.2 seconds'), 'RB23: after delivery 3 it waits max_retry_delay (1.2 s), not 2 s');

SELECT * FROM finish();
ROLLBACK;
