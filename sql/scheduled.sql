-- scheduled messages: send, peek, cancel, activation with a new sequence number. One sleep of 2 s.
\set VERBOSITY sqlstate
-- sequence numbers step by :step (1 on one server, 64 on a node of a distributed installation)
SELECT regress.step() AS step \gset
-- (in schema regress, dropped at the end: made in pg_temp, it draws a warning from Citus)
CREATE FUNCTION regress.show(queue text, base bigint) RETURNS TABLE(n bigint, body text, state text,
    delivery_count integer, locked boolean, scheduled boolean, lifetime interval) LANGUAGE sql AS $$
    SELECT regress.dist(sequence_number, base), convert_from(body, 'UTF8'), state, delivery_count,
           locked_until > clock_timestamp(), scheduled_enqueue_time IS NOT NULL,
           expires_at - scheduled_enqueue_time
      FROM sbq_peek(queue, 100) ORDER BY sequence_number
$$;

SELECT queue FROM sbq_create_queue('sc');
SELECT queue FROM sbq_create_queue('sc_other');

-- t = 0: future times give scheduled messages, a time in the past or now an active one
SELECT sbq_send('sc', 'first') AS first \gset
SELECT regress.dist(sbq_send('sc', 's1', scheduled_enqueue_time => clock_timestamp() + interval '1.5 seconds'), :first) AS s1 \gset
SELECT regress.dist(sbq_send('sc', 'sttl', time_to_live => '2 seconds',
                scheduled_enqueue_time => clock_timestamp() + interval '1.5 seconds'), :first) AS sttl \gset
SELECT regress.dist(sbq_send('sc', 'later', scheduled_enqueue_time => clock_timestamp() + interval '1 hour'), :first) AS later \gset
SELECT regress.dist(sbq_send('sc', 'past', scheduled_enqueue_time => clock_timestamp() - interval '1 minute'), :first) AS past \gset
SELECT regress.dist(sbq_send('sc', 'now', scheduled_enqueue_time => now()), :first) AS now \gset
SELECT count(*) FROM sbq_send_batch('sc', ARRAY['b1', 'b2'], scheduled_enqueue_time => clock_timestamp() + interval '1 hour');
SELECT regress.dist(sbq_send('sc_other', 'o1', scheduled_enqueue_time => clock_timestamp() + interval '1 hour'), :first) AS o1 \gset
\echo numbers: s1 :s1 sttl :sttl later :later past :past now :now o1 :o1
SELECT * FROM regress.show('sc', :first);
SELECT active_count, locked_count, deferred_count, scheduled_count, dead_letter_count, sent
  FROM sbq_queue_stats WHERE queue = 'sc';
-- never received early
SELECT regress.dist(sequence_number, :first) AS n, convert_from(body, 'UTF8') AS body FROM sbq_receive('sc', 100, receive_mode => 'receive_and_delete');
SELECT count(*) AS received FROM sbq_receive('sc', 100);

-- cancel errors: SB003 for anything that is not a scheduled message of that queue; nothing changes
SELECT regress.errc(format('SELECT sbq_cancel_scheduled(%L, %s)', 'sc', :first), :first);
SELECT regress.errc(format('SELECT sbq_cancel_scheduled(%L, %s)', 'sc', :first + 1000000 * :step), :first);
SELECT regress.errc(format('SELECT sbq_cancel_scheduled(%L, %s)', 'sc', :first + :o1 * :step), :first);
SELECT regress.errc(format('SELECT sbq_cancel_scheduled(%L, %s)', 'sc_other', :first + :later * :step), :first);
SELECT regress.errc(format('SELECT sbq_cancel_scheduled(%L, %s)', 'sc/$deadletterqueue', :first + :later * :step), :first);
SELECT regress.err($$SELECT sbq_cancel_scheduled('sc', NULL)$$);
SELECT regress.err(format('SELECT sbq_cancel_scheduled(NULL, %s)', :first + :later * :step));
SELECT regress.err(format('SELECT sbq_cancel_scheduled(%L, %s)', 'missing', :first + :later * :step));
SELECT regress.err(format('SELECT sbq_cancel_scheduled(%L, %s)', 'bad name!', :first + :later * :step));
SELECT n, body, state FROM regress.show('sc', :first);
SELECT n, body, state FROM regress.show('sc_other', :first);

-- cancel deletes the scheduled message
SELECT sbq_cancel_scheduled('SC', :first + :later * :step);
SELECT regress.errc(format('SELECT sbq_cancel_scheduled(%L, %s)', 'sc', :first + :later * :step), :first);
SELECT sbq_cancel_scheduled('sc_other', :first + :o1 * :step);
SELECT n, body, state FROM regress.show('sc', :first);
SELECT count(*) AS other FROM sbq_peek('sc_other', 10);
SELECT active_count, locked_count, deferred_count, scheduled_count FROM sbq_queue_stats WHERE queue = 'sc';

SELECT pg_sleep(2);

-- t = 2: s1 and sttl are due; a receive activates them with new, higher numbers at the back
SELECT regress.dist(sequence_number, :first) > :o1 AS renumbered, convert_from(body, 'UTF8') AS body, state, delivery_count,
       lock_token IS NOT NULL AS locked, enqueued_time >= scheduled_enqueue_time AS enqueued_when_due
  FROM sbq_receive('sc', 100) ORDER BY sequence_number;
SELECT n > :o1 AS renumbered, body, state, delivery_count, locked, scheduled FROM regress.show('sc', :first);
SELECT regress.errc(format('SELECT sbq_cancel_scheduled(%L, %s)', 'sc', :first + :s1 * :step), :first);
SELECT active_count, locked_count, deferred_count, scheduled_count FROM sbq_queue_stats WHERE queue = 'sc';

SELECT sbq_delete_queue('sc');
SELECT sbq_delete_queue('sc_other');
DROP FUNCTION regress.show(text, bigint);
