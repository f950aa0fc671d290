-- defer and receive_deferred: the normal path, every error, and that an error changes nothing
\set VERBOSITY sqlstate
-- sequence numbers step by :step (1 on one server, 64 on a node of a distributed installation)
SELECT regress.step() AS step \gset
-- the state of a queue, without tokens or times
-- (in schema regress, dropped at the end: made in pg_temp, it draws a warning from Citus)
CREATE FUNCTION regress.show(queue text, base bigint) RETURNS TABLE(n bigint, body text, state text,
    delivery_count integer, locked boolean, props jsonb) LANGUAGE sql AS $$
    SELECT regress.dist(sequence_number, base), convert_from(body, 'UTF8'), state, delivery_count,
           locked_until > clock_timestamp(), application_properties
      FROM sbq_peek(queue, 100) ORDER BY sequence_number
$$;

SELECT queue FROM sbq_create_queue('df', max_delivery_count => 3);
SELECT queue FROM sbq_create_queue('df_other');
SELECT min(seq) AS first FROM sbq_send_batch('df', ARRAY['m1', 'm2', 'm3', 'm4', 'm5'],
                                             application_properties => '{"keep": 1, "a": 0}') AS seq \gset

-- defer: the message stays in the queue, deferred, reachable only by its number
SELECT array_agg(lock_token ORDER BY sequence_number) AS toks FROM sbq_receive('df', 3) \gset
SELECT sbq_defer('df', (:'toks'::uuid[])[1]);
SELECT sbq_defer('df', (:'toks'::uuid[])[2], '{"a": 1, "added": null}');
SELECT * FROM regress.show('df', :first);
SELECT regress.dist(sequence_number, :first) AS n, delivery_count FROM sbq_receive('df', 10);
SELECT active_count, locked_count, deferred_count, scheduled_count, dead_letter_count, deferred
  FROM sbq_queue_stats WHERE queue = 'df';

-- defer errors: nothing changes (m3 stays locked, its properties as they were)
SELECT regress.errc(format('SELECT sbq_defer(%L, %L::uuid)', 'df', (:'toks'::uuid[])[1]));
SELECT regress.errc($$SELECT sbq_defer('df', gen_random_uuid())$$);
SELECT regress.errc(format('SELECT sbq_defer(%L, %L::uuid)', 'df_other', (:'toks'::uuid[])[3]));
SELECT regress.errc(format('SELECT sbq_defer(%L, %L::uuid)', 'df/$deadletterqueue', (:'toks'::uuid[])[3]));
SELECT regress.err(format('SELECT sbq_defer(%L, %L::uuid, %L)', 'df', (:'toks'::uuid[])[3], '[1]'));
SELECT regress.err(format('SELECT sbq_defer(%L, %L::uuid, %L)', 'df', (:'toks'::uuid[])[3], 'null'));
SELECT regress.err(format('SELECT sbq_defer(%L, %L::uuid, %L)', 'df', (:'toks'::uuid[])[3], '"text"'));
SELECT regress.err($$SELECT sbq_defer('df', NULL)$$);
SELECT regress.err(format('SELECT sbq_defer(NULL, %L::uuid)', (:'toks'::uuid[])[3]));
SELECT regress.err(format('SELECT sbq_defer(%L, %L::uuid)', 'missing', (:'toks'::uuid[])[3]));
SELECT regress.err(format('SELECT sbq_defer(%L, %L::uuid)', 'bad name!', (:'toks'::uuid[])[3]));
SELECT * FROM regress.show('df', :first);

-- receive_deferred: locks and returns them, counted, state deferred; a repeated number counts once
CREATE TEMP TABLE rd AS SELECT * FROM sbq_receive_deferred('df', ARRAY[:first + :step, :first, :first + :step]);
SELECT regress.dist(sequence_number, :first) AS n, convert_from(body, 'UTF8') AS body, state, delivery_count,
       lock_token IS NOT NULL AS has_token, lock_token <> ALL (:'toks'::uuid[]) AS new_token,
       locked_until > clock_timestamp() AS locked, application_properties
  FROM rd ORDER BY 1;
SELECT * FROM regress.show('df', :first);
SELECT active_count, locked_count, deferred_count FROM sbq_queue_stats WHERE queue = 'df';

-- receive_deferred errors: SB003 for anything that is not a deferred message free to lock;
-- nothing is locked
SELECT sbq_defer('df', (:'toks'::uuid[])[3]);
SELECT sbq_send('df_other', 'o1') AS o1 \gset
SELECT lock_token AS o1t FROM sbq_receive('df_other') \gset
SELECT sbq_defer('df_other', :'o1t');
SELECT regress.dist(sbq_send('df', 'scheduled', scheduled_enqueue_time => now() + interval '1 hour'), :first) AS sch \gset
-- m1 is locked by receive_deferred, m4 is active (and locked), the scheduled one, o1 of another queue, unknown
SELECT regress.errc(format('SELECT * FROM sbq_receive_deferred(%L, ARRAY[%s, %s])', 'df', :first + 2 * :step, :first), :first);
SELECT regress.errc(format('SELECT * FROM sbq_receive_deferred(%L, ARRAY[%s, %s])', 'df', :first + 2 * :step, :first + 3 * :step), :first);
SELECT regress.errc(format('SELECT * FROM sbq_receive_deferred(%L, ARRAY[%s, %s])', 'df', :first + 2 * :step, :first + :sch * :step), :first);
SELECT regress.errc(format('SELECT * FROM sbq_receive_deferred(%L, ARRAY[%s, %s])', 'df', :first + 2 * :step, :o1), :first);
SELECT regress.errc(format('SELECT * FROM sbq_receive_deferred(%L, ARRAY[%s, %s])', 'df', :first + 2 * :step, :first + 1000000 * :step), :first);
SELECT regress.errc(format('SELECT * FROM sbq_receive_deferred(%L, ARRAY[%s])', 'df/$deadletterqueue', :first + 2 * :step), :first);
SELECT regress.err(format('SELECT * FROM sbq_receive_deferred(%L, ARRAY[%s, NULL])', 'df', :first + 2 * :step));
SELECT regress.err($$SELECT * FROM sbq_receive_deferred('df', NULL)$$);
SELECT regress.err(format('SELECT * FROM sbq_receive_deferred(NULL, ARRAY[%s])', :first + 2 * :step));
SELECT regress.err(format('SELECT * FROM sbq_receive_deferred(%L, ARRAY[%s])', 'missing', :first + 2 * :step));
SELECT * FROM regress.show('df', :first);
SELECT count(*) AS empty_array FROM sbq_receive_deferred('df', ARRAY[]::bigint[]);
-- the other queue's deferred message, from its own queue
SELECT sequence_number = :o1 AS same, delivery_count, state FROM sbq_receive_deferred('df_other', ARRAY[:o1]);

-- settling received deferred messages: abandon keeps it deferred (and counts), complete removes
-- it, deadletter moves it, a defer on the last allowed delivery (3 of 3) dead-letters it
SELECT lock_token AS d2 FROM sbq_receive_deferred('df', ARRAY[:first + 2 * :step]) \gset
SELECT sbq_abandon('df', :'d2', '{"abandoned": true}');
SELECT * FROM regress.show('df', :first);
SELECT count(*) AS receivable FROM sbq_receive('df', 10);
SELECT lock_token AS d2, delivery_count FROM sbq_receive_deferred('df', ARRAY[:first + 2 * :step]) \gset
\echo third delivery of m3: :delivery_count
SELECT sbq_complete('df', lock_token) FROM rd WHERE sequence_number = :first;
SELECT sbq_deadletter('df', lock_token, 'Reason', 'Description') FROM rd WHERE sequence_number = :first + :step;
SELECT sbq_defer('df', :'d2');
SELECT * FROM regress.show('df', :first);
SELECT regress.dist(sequence_number, :first) AS n, convert_from(body, 'UTF8') AS body, state, delivery_count,
       dead_letter_reason, dead_letter_error_description, dead_letter_source
  FROM sbq_peek('df/$deadletterqueue', 10);
SELECT regress.errc(format('SELECT * FROM sbq_receive_deferred(%L, ARRAY[%s])', 'df', :first + 2 * :step), :first);
SELECT active_count, locked_count, deferred_count, scheduled_count, dead_letter_count,
       received, completed, abandoned, deferred, dead_lettered
  FROM sbq_queue_stats WHERE queue = 'df';

-- defer and receive_deferred on the dead-letter sub-queue
SELECT lock_token AS q1 FROM sbq_receive('df/$deadletterqueue') \gset
SELECT sbq_defer('df/$deadletterqueue', :'q1');
SELECT regress.dist(sequence_number, :first) AS n FROM sbq_receive('df/$deadletterqueue', 10);
SELECT regress.dist(sequence_number, :first) AS n, state FROM sbq_peek('df/$deadletterqueue', 10);
SELECT regress.dist(sequence_number, :first) AS n, state, delivery_count
  FROM sbq_receive_deferred('df/$deadletterqueue', ARRAY[:first + :step]);
SELECT regress.errc(format('SELECT * FROM sbq_receive_deferred(%L, ARRAY[%s])', 'df', :first + :step), :first);

SELECT sbq_delete_queue('df');
SELECT sbq_delete_queue('df_other');
DROP FUNCTION regress.show(text, bigint);
