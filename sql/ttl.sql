-- time to live: the ceiling, expiry by receive and by settlement, expired deferred messages,
-- dead letters never expire. One sleep of 2.5 s.
\set VERBOSITY sqlstate
-- sequence numbers step by :step (1 on one server, 64 on a node of a distributed installation)
SELECT regress.step() AS step \gset

-- the ceiling: a time_to_live above the queue's default_message_ttl is capped to it
SELECT queue, default_message_ttl FROM sbq_create_queue('tl_cap', default_message_ttl => '1 hour');
SELECT queue, default_message_ttl FROM sbq_create_queue('tl_none');
SELECT sbq_send('tl_cap', 'one day', time_to_live => '1 day') > 0 AS sent;
SELECT sbq_send('tl_cap', 'one minute', time_to_live => '1 minute') > 0 AS sent;
SELECT sbq_send('tl_cap', 'default') > 0 AS sent;
SELECT sbq_send('tl_none', 'forever') > 0 AS sent;
SELECT sbq_send('tl_none', 'one second', time_to_live => '1 second') > 0 AS sent;
SELECT convert_from(body, 'UTF8') AS body, time_to_live, expires_at - enqueued_time AS lifetime
  FROM sbq_peek('tl_cap', 10) ORDER BY sequence_number;
SELECT convert_from(body, 'UTF8') AS body, time_to_live, expires_at - enqueued_time AS lifetime
  FROM sbq_peek('tl_none', 10) ORDER BY sequence_number;
-- errors: nothing stored, no queue made or changed
SELECT regress.err($$SELECT sbq_send('tl_cap', 'x', time_to_live => '0')$$);
SELECT regress.err($$SELECT sbq_send('tl_cap', 'x', time_to_live => '-1 second')$$);
SELECT regress.err($$SELECT sbq_create_queue('tl_bad', default_message_ttl => '0.5 seconds')$$);
SELECT regress.err($$SELECT sbq_update_queue('tl_cap', default_message_ttl => '-1 hour')$$);
SELECT count(*) AS messages FROM sbq_peek('tl_cap', 10);
SELECT count(*) AS tl_bad FROM sbq_queues WHERE queue = 'tl_bad';
SELECT default_message_ttl FROM sbq_get_queue('tl_cap');
SELECT sbq_delete_queue('tl_cap');
SELECT sbq_delete_queue('tl_none');

-- t = 0
SELECT queue FROM sbq_create_queue('tl_drop', lock_duration => '5 seconds');
SELECT queue FROM sbq_create_queue('tl_dl', lock_duration => '5 seconds', dead_lettering_on_message_expiration => true);
SELECT queue FROM sbq_create_queue('tl_dlq', default_message_ttl => '1 second', dead_lettering_on_message_expiration => true);
-- locked (lock 5 s) when their TTL (1 s) passes
SELECT min(seq) AS drop_first FROM sbq_send_batch('tl_drop', ARRAY['L3', 'D1'], time_to_live => '1 second') AS seq \gset
SELECT min(seq) AS dl_first FROM sbq_send_batch('tl_dl', ARRAY['L1', 'L2', 'L4', 'L5', 'D2'], time_to_live => '1 second') AS seq \gset
CREATE TEMP TABLE lk AS
    SELECT convert_from(body, 'UTF8') AS name, * FROM sbq_receive('tl_drop', 10)
    UNION ALL SELECT convert_from(body, 'UTF8'), * FROM sbq_receive('tl_dl', 10);
SELECT name, delivery_count, time_to_live, expires_at - enqueued_time AS lifetime FROM lk ORDER BY sequence_number;
SELECT sbq_defer('tl_drop', lock_token) FROM lk WHERE name = 'D1';
SELECT sbq_defer('tl_dl', lock_token) FROM lk WHERE name = 'D2';
-- not locked
SELECT regress.dist(sbq_send('tl_drop', 'e1', time_to_live => '1 second'), :drop_first) AS e1 \gset
SELECT sbq_send('tl_drop', 'keep', time_to_live => '1 hour') > 0 AS sent;
SELECT sbq_send('tl_dl', 'e2', time_to_live => '1 second') > 0 AS sent;
-- a dead letter of a queue whose messages live 1 s
SELECT sbq_send('tl_dlq', 'dead') > 0 AS sent;
SELECT sbq_deadletter('tl_dlq', lock_token, 'Poison') FROM sbq_receive('tl_dlq');

SELECT pg_sleep(2.5);

-- t = 2.5: the receive that meets an expired message drops it or dead-letters it
SELECT convert_from(body, 'UTF8') AS body, delivery_count FROM sbq_receive('tl_drop', 10);
SELECT convert_from(body, 'UTF8') AS body, state FROM sbq_peek('tl_drop', 10) WHERE sequence_number <> :drop_first + :step ORDER BY sequence_number;
SELECT count(*) AS dead_letters FROM sbq_peek('tl_drop/$deadletterqueue', 10);
SELECT count(*) AS received FROM sbq_receive('tl_dl', 10);
SELECT convert_from(body, 'UTF8') AS body, delivery_count, dead_letter_reason, dead_letter_error_description,
       dead_letter_source, state
  FROM sbq_peek('tl_dl/$deadletterqueue', 10) ORDER BY sequence_number;

-- locked when the TTL passed: complete succeeds; abandon and defer expire it at once;
-- an explicit deadletter keeps its own reason
SELECT sbq_complete('tl_dl', lock_token) FROM lk WHERE name = 'L1';
SELECT sbq_abandon('tl_dl', lock_token) FROM lk WHERE name = 'L2';
SELECT sbq_defer('tl_dl', lock_token) FROM lk WHERE name = 'L4';
SELECT sbq_deadletter('tl_dl', lock_token, 'Mine', 'explicit') FROM lk WHERE name = 'L5';
SELECT sbq_abandon('tl_drop', lock_token) FROM lk WHERE name = 'L3';
SELECT convert_from(body, 'UTF8') AS body, dead_letter_reason, dead_letter_error_description
  FROM sbq_peek('tl_dl/$deadletterqueue', 10) ORDER BY sequence_number;
SELECT convert_from(body, 'UTF8') AS body, state FROM sbq_peek('tl_dl', 10) ORDER BY sequence_number;
SELECT convert_from(body, 'UTF8') AS body FROM sbq_peek('tl_drop', 10) WHERE sequence_number <> :drop_first + :step ORDER BY sequence_number;
SELECT count(*) AS dead_letters FROM sbq_peek('tl_drop/$deadletterqueue', 10);

-- an expired deferred message: receive_deferred says SB003; maintenance dead-letters or drops it
SELECT regress.errc(format('SELECT * FROM sbq_receive_deferred(%L, ARRAY[%s])', 'tl_dl', :dl_first + 4 * :step), :dl_first);
SELECT regress.errc(format('SELECT * FROM sbq_receive_deferred(%L, ARRAY[%s])', 'tl_drop', :drop_first + :step), :drop_first);
SELECT sbq_maintain() IS NOT NULL AS maintained;
SELECT convert_from(body, 'UTF8') AS body, dead_letter_reason FROM sbq_peek('tl_dl/$deadletterqueue', 10)
 WHERE sequence_number = :dl_first + 4 * :step;
SELECT count(*) AS d2_in_queue FROM sbq_peek('tl_dl', 10) WHERE sequence_number = :dl_first + 4 * :step;
SELECT count(*) AS d1_anywhere FROM (SELECT * FROM sbq_peek('tl_drop', 10) UNION ALL
                                     SELECT * FROM sbq_peek('tl_drop/$deadletterqueue', 10)) m
 WHERE sequence_number = :drop_first + :step;
SELECT active_count, locked_count, deferred_count, dead_letter_count, expired, dead_lettered
  FROM sbq_queue_stats WHERE queue IN ('tl_drop', 'tl_dl') ORDER BY queue;

-- a dead letter never expires
SELECT convert_from(body, 'UTF8') AS body, dead_letter_reason FROM sbq_peek('tl_dlq/$deadletterqueue');
SELECT convert_from(body, 'UTF8') AS body, delivery_count FROM sbq_receive('tl_dlq/$deadletterqueue', receive_mode => 'receive_and_delete');

SELECT sbq_delete_queue('tl_drop');
SELECT sbq_delete_queue('tl_dl');
SELECT sbq_delete_queue('tl_dlq');
