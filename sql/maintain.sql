-- sbq_maintain(): rights, the counts it returns, what it does, idempotence, a receive and a pass
-- in one transaction. One sleep of 2 s (lock expiry and the duplicate window need longer: pgTAP).
\set VERBOSITY sqlstate
-- the counts of a pass, by the names the contract gives them
-- (in schema regress, dropped at the end: made in pg_temp, it draws a warning from Citus)
CREATE FUNCTION regress.counts(j jsonb) RETURNS TABLE(queues_visited boolean, scheduled_activated int,
    locks_released int, dead_lettered int, expired_dead_lettered int, expired_dropped int,
    duplicates_forgotten int, more boolean) LANGUAGE sql AS $$
    SELECT (j ->> 'queues')::int = (SELECT count(*) FROM sbq_queues), (j ->> 'scheduled_activated')::int,
           (j ->> 'locks_released')::int, (j ->> 'dead_lettered')::int, (j ->> 'expired_dead_lettered')::int,
           (j ->> 'expired_dropped')::int, (j ->> 'duplicates_forgotten')::int, (j ->> 'more')::boolean
$$;

-- rights: not for PUBLIC
SELECT has_function_privilege('public', 'sbq_maintain()', 'EXECUTE') AS public_may_run;
CREATE ROLE regress_sbq_nobody;
SET ROLE regress_sbq_nobody;
SELECT regress.err($$SELECT sbq_maintain()$$);
RESET ROLE;
DROP ROLE regress_sbq_nobody;

-- the shape of the result
SELECT k, jsonb_typeof(sbq_maintain() -> k) AS type
  FROM unnest(ARRAY['queues', 'scheduled_activated', 'locks_released', 'dead_lettered', 'expired_dead_lettered',
                    'expired_dropped', 'duplicates_forgotten', 'more']) AS k;
SELECT * FROM regress.counts(sbq_maintain());

-- t = 0
SELECT queue FROM sbq_create_queue('mt_dl', dead_lettering_on_message_expiration => true);
SELECT queue FROM sbq_create_queue('mt_drop', duplicate_detection_window => '1 minute');
SELECT sbq_send('mt_dl', 'd1', time_to_live => '1 second') AS d1 \gset
SELECT sbq_defer('mt_dl', lock_token) FROM sbq_receive('mt_dl');
SELECT sbq_send('mt_dl', 'e1', time_to_live => '1 second') > 0 AS sent;
SELECT sbq_send('mt_dl', 'keep', time_to_live => '1 hour') > 0 AS sent;
SELECT sbq_send('mt_drop', 'locked', time_to_live => '1 second') > 0 AS sent;
SELECT lock_token AS locked FROM sbq_receive('mt_drop') \gset
SELECT sbq_send('mt_drop', 'e2', time_to_live => '1 second', message_id => 'e2') > 0 AS sent;
SELECT sbq_send('mt_drop', 's1', scheduled_enqueue_time => clock_timestamp() + interval '1 second') AS s1 \gset
SELECT sbq_send('mt_drop', 'later', scheduled_enqueue_time => clock_timestamp() + interval '1 hour') > 0 AS sent;
SELECT * FROM regress.counts(sbq_maintain());

SELECT pg_sleep(2);

-- t = 2: one pass does everything that is due
SELECT * FROM regress.counts(sbq_maintain());
SELECT convert_from(body, 'UTF8') AS body, state, delivery_count FROM sbq_peek('mt_dl', 10) ORDER BY sequence_number;
SELECT convert_from(body, 'UTF8') AS body, state, dead_letter_reason, dead_letter_source
  FROM sbq_peek('mt_dl/$deadletterqueue', 10) ORDER BY sequence_number;
SELECT convert_from(body, 'UTF8') AS body, state, sequence_number > :s1 AS after_old_s1_number,
       locked_until IS NOT NULL AS locked
  FROM sbq_peek('mt_drop', 10) ORDER BY sequence_number;
SELECT count(*) AS dead_letters FROM sbq_peek('mt_drop/$deadletterqueue', 10);
SELECT queue, active_count, locked_count, deferred_count, scheduled_count, dead_letter_count, expired, dead_lettered
  FROM sbq_queue_stats WHERE queue LIKE 'mt%' ORDER BY queue;

-- a second pass right after finds nothing to do
SELECT * FROM regress.counts(sbq_maintain());
-- the locked message whose time to live passed was left alone: it can still be completed
SELECT sbq_complete('mt_drop', :'locked'::uuid);

-- a receive and a pass in one transaction: the pass leaves the fresh locks alone
BEGIN;
CREATE TEMP TABLE r ON COMMIT DROP AS SELECT * FROM sbq_receive('mt_drop', 10);
SELECT * FROM regress.counts(sbq_maintain());
SELECT count(*) AS completed FROM (SELECT sbq_complete('mt_drop', lock_token) FROM r) c;
COMMIT;
-- a duplicate within the window is still one after passes
SELECT sbq_send('mt_drop', 'e2 again', message_id => 'e2') > 0 AS sent;
SELECT count(*) AS e2_messages FROM sbq_peek('mt_drop', 10) WHERE message_id = 'e2';

SELECT sbq_delete_queue('mt_dl');
SELECT sbq_delete_queue('mt_drop');
DROP FUNCTION regress.counts(jsonb);
