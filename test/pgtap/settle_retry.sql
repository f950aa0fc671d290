-- sbqueue pgTAP: a queue's retry back-off for abandoned messages (0.9).
-- sbq_create_queue / sbq_update_queue take retry_delay, retry_backoff and
-- max_retry_delay. An abandon in the main queue that gives no delay of its own waits
-- retry_delay before the message may be received again; with retry_backoff the delay
-- doubles with each delivery (retry_delay * 2^(delivery_count - 1)), at most
-- max_retry_delay. An explicit delay ('0' too) wins; defer and the dead-letter
-- sub-queue wait nothing; the last allowed delivery dead-letters at once. A queue that
-- requires sessions cannot have one (22023).
-- Sleeps: about 3 s in all (back-off of 0.5 s, 1 s, then the 1.2 s cap).
-- Time checks use the wall clock (clock_timestamp()).
BEGIN;
SELECT plan(42);

\ir bad_input_setup.psql

-- the delay a message is held back for: its locked_until (no lock token) from now, in
-- tenths of a second
CREATE FUNCTION pg_temp.held(_q text) RETURNS numeric LANGUAGE sql AS $$
    SELECT round(extract(epoch FROM p.locked_until - clock_timestamp())::numeric, 1)
      FROM sbq_peek(_q) p WHERE p.lock_token IS NULL
$$;

-- receive the one message of _q (waiting up to 5 s), abandon it without a delay;
-- returns its delivery count
CREATE FUNCTION pg_temp.fail_once(_q text) RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
    m record;
BEGIN
    SELECT * INTO m FROM sbq_receive(_q, 1, '5 seconds');
    IF m.lock_token IS NULL THEN
        RAISE EXCEPTION 'fixture: nothing to receive in %', _q;
    END IF;
    PERFORM sbq_abandon(_q, m.lock_token);
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
SELECT lives_ok($$SELECT sbq_abandon('sr_fixed', (SELECT lock_token FROM f WHERE body = 'f1'))$$,
                'setup: f1 abandoned without a delay of its own');
SELECT is(pg_temp.held('sr_fixed'), 2.0, 'RB13: it is held back for the queue''s retry_delay (2 s)');
SELECT is_empty($$SELECT * FROM sbq_receive('sr_fixed')$$, 'RB14: no receive gets it meanwhile');
SELECT lives_ok($$SELECT sbq_abandon('sr_fixed', (SELECT lock_token FROM f WHERE body = 'f2'), delay => '0')$$,
                'setup: f2 abandoned with a delay of 0');
CREATE TEMP TABLE f2 AS SELECT * FROM sbq_receive('sr_fixed', 4);
SELECT is((SELECT array_agg(convert_from(body, 'UTF8')) FROM f2), ARRAY['f2'],
          'RB15: an explicit delay of 0 wins: f2 is received again at once');
SELECT is((SELECT outcome FROM sbq_settle('sr_fixed', ARRAY(SELECT lock_token FROM f WHERE body = 'f3'), 'abandon')),
          'abandoned', 'setup: f3 abandoned through sbq_settle, no delay given');
SELECT is((SELECT round(extract(epoch FROM locked_until - clock_timestamp())::numeric, 1)
             FROM sbq_peek('sr_fixed', 10) WHERE convert_from(body, 'UTF8') = 'f3'),
          2.0, 'RB16: sbq_settle''s abandon is held back by the queue''s retry_delay too');
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
SELECT is(pg_temp.held('sr_back'), 0.5, 'RB21: after delivery 1 the message waits retry_delay (0.5 s)');
SELECT is(pg_temp.fail_once('sr_back'), 2, 'setup: delivery 2 abandoned (received after the wait)');
SELECT is(pg_temp.held('sr_back'), 1.0, 'RB22: after delivery 2 it waits twice that (1 s)');
SELECT is(pg_temp.fail_once('sr_back'), 3, 'setup: delivery 3 abandoned');
SELECT is(pg_temp.held('sr_back'), 1.2, 'RB23: after delivery 3 it waits max_retry_delay (1.2 s), not 2 s');

SELECT * FROM finish();
ROLLBACK;
