-- deadletter, the dead-letter sub-queue and resubmit: the normal path, every error, and that an
-- error changes nothing
\set VERBOSITY sqlstate
-- sequence numbers step by :step (1 on one server, 64 on a node of a distributed installation)
SELECT regress.step() AS step \gset
-- the state of a queue or dead-letter queue, without tokens or times
-- (in schema regress, dropped at the end: made in pg_temp, it draws a warning from Citus)
CREATE FUNCTION regress.show(queue text, base bigint) RETURNS TABLE(n bigint, body text, state text,
    delivery_count integer, locked boolean, reason text, description text, source text, props jsonb)
LANGUAGE sql AS $$
    SELECT regress.dist(sequence_number, base), convert_from(body, 'UTF8'), state, delivery_count,
           locked_until > clock_timestamp(), left(dead_letter_reason, 16), left(dead_letter_error_description, 16),
           dead_letter_source, application_properties
      FROM sbq_peek(queue, 100) ORDER BY sequence_number
$$;

SELECT queue FROM sbq_create_queue('dl', max_delivery_count => 2);
SELECT queue FROM sbq_create_queue('dl_other');
SELECT min(seq) AS first FROM sbq_send_batch('dl', ARRAY['m1', 'm2', 'm3', 'm4'],
                                             application_properties => '{"keep": 1, "p": "old"}') AS seq \gset
SELECT array_agg(lock_token ORDER BY sequence_number) AS toks FROM sbq_receive('dl', 4) \gset

-- deadletter errors: nothing changes (m1 stays locked in the queue, nothing in the dead-letter queue)
SELECT regress.err(format('SELECT sbq_deadletter(%L, %L::uuid, %L)', 'dl', (:'toks'::uuid[])[1], repeat('r', 4097)));
SELECT regress.err(format('SELECT sbq_deadletter(%L, %L::uuid, %L, %L)', 'dl', (:'toks'::uuid[])[1], 'r', repeat('d', 4097)));
SELECT regress.err(format('SELECT sbq_deadletter(%L, %L::uuid, %L, %L, %L)', 'dl', (:'toks'::uuid[])[1], 'r', 'd', '[1]'));
SELECT regress.err(format('SELECT sbq_deadletter(%L, %L::uuid, %L, %L, %L)', 'dl', (:'toks'::uuid[])[1], 'r', 'd', '42'));
SELECT regress.errc($$SELECT sbq_deadletter('dl', gen_random_uuid(), 'r')$$);
SELECT regress.errc(format('SELECT sbq_deadletter(%L, %L::uuid)', 'dl_other', (:'toks'::uuid[])[1]));
SELECT regress.err(format('SELECT sbq_deadletter(%L, %L::uuid)', 'dl/$deadletterqueue', (:'toks'::uuid[])[1]));
SELECT regress.err($$SELECT sbq_deadletter('dl', NULL, 'r')$$);
SELECT regress.err(format('SELECT sbq_deadletter(NULL, %L::uuid)', (:'toks'::uuid[])[1]));
SELECT regress.err(format('SELECT sbq_deadletter(%L, %L::uuid)', 'missing', (:'toks'::uuid[])[1]));
SELECT regress.err(format('SELECT sbq_deadletter(%L, %L::uuid)', '/bad', (:'toks'::uuid[])[1]));
SELECT * FROM regress.show('dl', :first);
SELECT count(*) AS dead_letters FROM sbq_peek('dl/$deadletterqueue', 10);

-- deadletter: reason and description up to 4096 characters, properties merged, delivery_count kept
SELECT sbq_deadletter('dl', (:'toks'::uuid[])[1], 'BadData', 'field x missing', '{"p": "q", "z": null}');
SELECT sbq_deadletter('dl', (:'toks'::uuid[])[2]);
SELECT sbq_deadletter('dl', (:'toks'::uuid[])[3], repeat('r', 4096), repeat('d', 4096));
SELECT * FROM regress.show('dl', :first);
SELECT * FROM regress.show('dl/$deadletterqueue', :first);
SELECT regress.dist(sequence_number, :first) AS n, length(dead_letter_reason) AS reason_length,
       length(dead_letter_error_description) AS description_length
  FROM sbq_peek('dl/$deadletterqueue', 10) ORDER BY sequence_number;
SELECT regress.errc(format('SELECT sbq_complete(%L, %L::uuid)', 'dl', (:'toks'::uuid[])[1]));
SELECT active_count, locked_count, dead_letter_count, dead_lettered FROM sbq_queue_stats WHERE queue = 'dl';

-- the dead-letter sub-queue: receive, renew, abandon (no delivery limit), complete; deadletter
-- there fails with SB010 whatever the token
SELECT lock_token AS q1, delivery_count FROM sbq_receive('dl/$DeadLetterQueue') \gset
\echo first delivery from the dead-letter queue: :delivery_count
SELECT regress.err(format('SELECT sbq_deadletter(%L, %L::uuid, %L)', 'dl/$deadletterqueue', :'q1', 'again'));
SELECT regress.err($$SELECT sbq_deadletter('dl/$deadletterqueue', gen_random_uuid())$$);
SELECT regress.errc(format('SELECT sbq_abandon(%L, %L::uuid)', 'dl', :'q1'));
SELECT sbq_renew('dl/$deadletterqueue', :'q1') > clock_timestamp() AS renewed;
SELECT sbq_abandon('dl/$deadletterqueue', :'q1', '{"tries": 1}');
SELECT lock_token AS q1 FROM sbq_receive('dl/$deadletterqueue') \gset
SELECT sbq_abandon('dl/$deadletterqueue', :'q1');
SELECT regress.dist(sequence_number, :first) AS n, delivery_count, lock_token AS q1 FROM sbq_receive('dl/$deadletterqueue') \gset
\echo dead letter <first+:n> delivery :delivery_count
SELECT * FROM regress.show('dl/$deadletterqueue', :first);
SELECT sbq_complete('dl/$deadletterqueue', :'q1'::uuid);
SELECT count(*) AS in_queue FROM sbq_peek('dl', 10);
SELECT n, body FROM regress.show('dl/$deadletterqueue', :first);

-- resubmit errors: SB003 (all or nothing), 22004, SB001, 22023
SELECT lock_token AS q2 FROM sbq_receive('dl/$deadletterqueue') \gset
SELECT regress.errc(format('SELECT sbq_resubmit(%L, ARRAY[%s])', 'dl', :first + :step), :first);
SELECT regress.errc(format('SELECT sbq_resubmit(%L, ARRAY[%s, %s])', 'dl', :first + 2 * :step, :first + 3 * :step), :first);
SELECT regress.errc(format('SELECT sbq_resubmit(%L, ARRAY[%s, %s])', 'dl', :first + 2 * :step, :first + 1000000 * :step), :first);
SELECT regress.errc(format('SELECT sbq_resubmit(%L, ARRAY[%s])', 'dl_other', :first + 2 * :step), :first);
SELECT regress.err(format('SELECT sbq_resubmit(%L, ARRAY[%s, NULL])', 'dl', :first + 2 * :step));
SELECT regress.err($$SELECT sbq_resubmit(NULL)$$);
SELECT regress.err($$SELECT sbq_resubmit('missing')$$);
SELECT regress.err($$SELECT sbq_resubmit('bad name!')$$);
SELECT n, body, locked FROM regress.show('dl/$deadletterqueue', :first);
SELECT n, body FROM regress.show('dl', :first);

-- resubmit: new numbers at the back of the queue in the old order, delivery_count 0, dead-letter
-- fields cleared; NULL moves every dead letter no valid lock holds
SELECT sbq_abandon('dl/$deadletterqueue', :'q2');
SELECT regress.dist(sbq_send('dl', 'm5'), :first) AS m5 \gset
SELECT enqueued_time AS m5_time FROM sbq_peek('dl', 1, :first + :m5 * :step) \gset
SELECT sbq_resubmit('dl', ARRAY[]::bigint[]);
SELECT sbq_resubmit('dl/$deadletterqueue');
SELECT count(*) AS dead_letters FROM sbq_peek('dl/$deadletterqueue', 10);
SELECT convert_from(body, 'UTF8') AS body, sequence_number > :first + :m5 * :step AS renumbered, state, delivery_count,
       dead_letter_reason, dead_letter_error_description, dead_letter_source, application_properties,
       enqueued_time > :'m5_time'::timestamptz AS enqueued_later
  FROM sbq_peek('dl', 10) ORDER BY sequence_number;
CREATE TEMP TABLE rs AS SELECT * FROM sbq_receive('dl', 10);
SELECT convert_from(body, 'UTF8') AS body, delivery_count FROM rs ORDER BY sequence_number;

-- resubmit given numbers
SELECT sbq_deadletter('dl', lock_token, 'again') FROM rs WHERE convert_from(body, 'UTF8') IN ('m2', 'm3');
SELECT sbq_resubmit('dl', ARRAY(SELECT sequence_number FROM rs WHERE convert_from(body, 'UTF8') = 'm3'));
SELECT convert_from(body, 'UTF8') AS body, dead_letter_reason FROM sbq_peek('dl/$deadletterqueue', 10);
SELECT convert_from(body, 'UTF8') AS body, state, delivery_count, locked_until IS NULL AS unlocked
  FROM sbq_peek('dl', 10) ORDER BY sequence_number;
SELECT active_count, locked_count, dead_letter_count, sent, dead_lettered FROM sbq_queue_stats WHERE queue = 'dl';

SELECT sbq_delete_queue('dl');
SELECT sbq_delete_queue('dl_other');
DROP FUNCTION regress.show(text, bigint);
