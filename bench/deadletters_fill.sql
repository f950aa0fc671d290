-- bench/deadletters_fill.sql: :count dead letters for the queue :'queue', inserted directly
-- (bench/deadletters.sh). Going through the API a message at a time would take longer than
-- the benchmark; the rows are those sbq_deadletter writes (the reason of an exceeded
-- delivery count, 10 deliveries, the body bench/sbq_cycle.sql sends, a fresh sequence
-- number each), in the table where the installed version keeps dead letters:
-- sbq.dead_letters from 0.4 on, sbq.messages with subqueue = 1 before.
CREATE TEMP VIEW bench_dead_letters AS
SELECT nextval('sbq.message_seq') AS sequence_number,
       q.queue_id,
       1::smallint AS subqueue,
       0::smallint AS state,
       10 AS delivery_count,
       clock_timestamp() - interval '1 day' AS enqueued_time,
       gen_random_uuid()::text AS message_id,
       'text/plain; charset=utf-8'::text AS content_type,
       'MaxDeliveryCountExceeded'::text AS dead_letter_reason,
       'made by bench/deadletters.sh'::text AS dead_letter_error_description,
       q.name AS dead_letter_source,
       clock_timestamp() - interval '1 hour' AS dead_lettered_at,
       convert_to('bench message body: 0123456789 abcdefghijklmnopqrstuvwxyz ABCDEFGHIJKLMNOPQRSTUVWXYZ 0123456789 end', 'UTF8') AS body
  FROM sbq.queues q, generate_series(1, :count) i
 WHERE q.name_key = lower(:'queue');

SELECT to_regclass('sbq.dead_letters') IS NOT NULL AS own_table \gset
\if :own_table
INSERT INTO sbq.dead_letters (sequence_number, queue_id, subqueue, state, delivery_count,
        enqueued_time, message_id, content_type, dead_letter_reason,
        dead_letter_error_description, dead_letter_source, dead_lettered_at, body)
SELECT sequence_number, queue_id, subqueue, state, delivery_count, enqueued_time, message_id,
       content_type, dead_letter_reason, dead_letter_error_description, dead_letter_source,
       dead_lettered_at, body
  FROM bench_dead_letters;
\else
INSERT INTO sbq.messages (sequence_number, queue_id, subqueue, state, delivery_count,
        enqueued_time, message_id, content_type, dead_letter_reason,
        dead_letter_error_description, dead_letter_source, body)
SELECT sequence_number, queue_id, subqueue, state, delivery_count, enqueued_time, message_id,
       content_type, dead_letter_reason, dead_letter_error_description, dead_letter_source, body
  FROM bench_dead_letters;
\endif
DROP VIEW bench_dead_letters;
