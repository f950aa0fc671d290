-- settle: complete, abandon, renew, lock loss and dead-lettering at the delivery limit
\set VERBOSITY sqlstate

SELECT queue FROM sbq_create_queue('c', lock_duration => '5 seconds', max_delivery_count => 2);
SELECT queue FROM sbq_create_queue('other');
SELECT sbq_send('c', 'one') AS seq1 \gset

-- complete removes the message; a second complete has lost its lock
SELECT lock_token AS t1 FROM sbq_receive('c') \gset
SELECT sbq_complete('c', :'t1'::uuid);
SELECT count(*) AS left_after FROM sbq_peek('c', 10);
SELECT regress.errc(format('SELECT sbq_complete(%L, %L::uuid)', 'c', :'t1'));

-- unknown tokens, tokens of another queue, the wrong sub-queue: SB002, nothing changes
SELECT sbq_send('c', 'two') > 0 AS sent;
SELECT lock_token AS t2 FROM sbq_receive('c') \gset
SELECT regress.errc($$SELECT sbq_complete('c', gen_random_uuid())$$);
SELECT regress.errc($$SELECT sbq_abandon('c', gen_random_uuid())$$);
SELECT regress.errc($$SELECT sbq_renew('c', gen_random_uuid())$$);
SELECT regress.errc(format('SELECT sbq_complete(%L, %L::uuid)', 'other', :'t2'));
SELECT regress.errc(format('SELECT sbq_abandon(%L, %L::uuid)', 'other', :'t2'));
SELECT regress.errc(format('SELECT sbq_renew(%L, %L::uuid)', 'other', :'t2'));
SELECT regress.errc(format('SELECT sbq_complete(%L, %L::uuid)', 'c/$deadletterqueue', :'t2'));
SELECT regress.errc(format('SELECT sbq_complete(%L, %L::uuid)', 'missing', :'t2'));
SELECT delivery_count, locked_until IS NOT NULL AS still_locked FROM sbq_peek('c');

-- renew extends the lock from now by the lock duration
SELECT locked_until AS before FROM sbq_peek('c') \gset
SELECT pg_sleep(0.2);
SELECT sbq_renew('c', :'t2') > :'before'::timestamptz AS extended;
SELECT locked_until > :'before'::timestamptz AS stored FROM sbq_peek('c');

-- abandon: available again at once, counted, properties merged at the top level
SELECT max_delivery_count FROM sbq_update_queue('c', max_delivery_count => 5);
SELECT sbq_send('c', 'props', application_properties => '{"keep": 1, "replace": "old"}') AS seq3 \gset
SELECT sbq_complete('c', :'t2'::uuid);
SELECT lock_token AS t3 FROM sbq_receive('c') \gset
SELECT regress.err(format('SELECT sbq_abandon(%L, %L::uuid, %L)', 'c', :'t3', '[1]'));
SELECT locked_until IS NOT NULL AS still_locked_after_bad_abandon FROM sbq_peek('c');
SELECT sbq_abandon('c', :'t3', '{"replace": "new", "added": null}');
SELECT sequence_number = :seq3 AS same, delivery_count, application_properties
  FROM sbq_receive('c') \gset
\echo :same :delivery_count :application_properties
SELECT lock_token AS t3b FROM sbq_peek('c');
SELECT regress.errc(format('SELECT sbq_abandon(%L, %L::uuid)', 'c', :'t3'));

-- the uuid[] complete is all or nothing
SELECT sbq_purge_queue('c');
SELECT count(*) FROM sbq_send_batch('c', ARRAY['a', 'b', 'c']);
SELECT array_agg(lock_token ORDER BY sequence_number) AS toks FROM sbq_receive('c', 3) \gset
SELECT regress.errc(format('SELECT sbq_complete(%L, %L::uuid[] || gen_random_uuid())', 'c', :'toks'));
SELECT regress.errc(format('SELECT sbq_complete(%L, %L::uuid[] || (%L::uuid[])[1])', 'c', :'toks', :'toks'));
SELECT regress.err(format('SELECT sbq_complete(%L, %L::uuid[] || NULL::uuid)', 'c', :'toks'));
SELECT regress.err($$SELECT sbq_complete('c', NULL::uuid[])$$);
SELECT count(*) AS none_completed FROM sbq_peek('c', 10);
SELECT sbq_complete('c', ARRAY[]::uuid[]);
SELECT sbq_complete('c', :'toks'::uuid[]);
SELECT count(*) AS all_completed FROM sbq_peek('c', 10);

-- NULL arguments: 22004
SELECT regress.err($$SELECT sbq_complete('c', NULL::uuid)$$);
SELECT regress.err($$SELECT sbq_complete(NULL, gen_random_uuid())$$);
SELECT regress.err($$SELECT sbq_abandon('c', NULL)$$);
SELECT regress.err($$SELECT sbq_renew('c', NULL)$$);

-- settling commits with the caller's transaction
SELECT sbq_send('c', 'tx') > 0 AS sent;
SELECT lock_token AS t4 FROM sbq_receive('c') \gset
BEGIN;
SELECT sbq_complete('c', :'t4'::uuid);
ROLLBACK;
SELECT count(*) AS still_there FROM sbq_peek('c');
SELECT sbq_complete('c', :'t4'::uuid);

-- max_delivery_count 2: the second abandon dead-letters at once
SELECT max_delivery_count FROM sbq_update_queue('c', max_delivery_count => 2);
SELECT sbq_send('c', 'poison') AS seq5 \gset
SELECT lock_token AS t FROM sbq_receive('c') \gset
SELECT sbq_abandon('c', :'t');
SELECT delivery_count, lock_token AS t FROM sbq_receive('c') \gset
\echo second delivery :delivery_count
SELECT sbq_abandon('c', :'t');
SELECT count(*) AS in_queue FROM sbq_peek('c');
SELECT sequence_number = :seq5 AS same, delivery_count, dead_letter_reason,
       dead_letter_error_description, dead_letter_source, state
  FROM sbq_peek('c/$deadletterqueue');
SELECT active_count, dead_letter_count, abandoned, dead_lettered FROM sbq_queue_stats WHERE queue = 'c';

-- the dead-letter sub-queue: receive, abandon without a delivery limit, complete
SELECT lock_token AS d FROM sbq_receive('c/$DEADLETTERQUEUE') \gset
SELECT sbq_abandon('c/$deadletterqueue', :'d');
SELECT lock_token AS d FROM sbq_receive('c/$deadletterqueue') \gset
SELECT sbq_abandon('c/$deadletterqueue', :'d');
SELECT delivery_count, lock_token AS d FROM sbq_receive('c/$deadletterqueue') \gset
\echo dead letter delivery :delivery_count
SELECT regress.errc(format('SELECT sbq_complete(%L, %L::uuid)', 'c', :'d'));
SELECT sbq_complete('c/$deadletterqueue', :'d'::uuid);
SELECT count(*) AS dead_letters FROM sbq_peek('c/$deadletterqueue');

-- lock expiry: the token is lost, the message comes back with delivery_count 2;
-- a message whose last allowed delivery expired is dead-lettered, never handed out
SELECT queue FROM sbq_create_queue('x', lock_duration => '5 seconds', max_delivery_count => 2);
SELECT sbq_send('x', 'expiring') AS seq6 \gset
SELECT lock_token AS t6 FROM sbq_receive('x') \gset
SELECT sbq_send('x', 'last chance') AS seq7 \gset
SELECT lock_token AS t7 FROM sbq_receive('x') \gset
SELECT sbq_abandon('x', :'t7');
SELECT sequence_number = :seq7 AS same, delivery_count, lock_token AS t7 FROM sbq_receive('x') \gset
\echo :same :delivery_count
SELECT count(*) AS nothing_available FROM sbq_receive('x', 5);
SELECT pg_sleep(5.2);
SELECT regress.errc(format('SELECT sbq_complete(%L, %L::uuid)', 'x', :'t6'));
SELECT regress.errc(format('SELECT sbq_renew(%L, %L::uuid)', 'x', :'t6'));
SELECT regress.errc(format('SELECT sbq_abandon(%L, %L::uuid)', 'x', :'t7'));
-- both locks ran out: until a receive or maintenance moves the one on its last
-- delivery, both are active, and the stats say what the peeks show
SELECT locked_count, active_count, dead_letter_count,
       (SELECT count(*) FROM sbq_peek('x', 10)) AS peek_queue,
       (SELECT count(*) FROM sbq_peek('x/$deadletterqueue', 10)) AS peek_dead_letters
  FROM sbq_queue_stats WHERE queue = 'x';
SELECT sequence_number = :seq6 AS same, delivery_count, lock_token <> :'t6'::uuid AS new_token
  FROM sbq_receive('x', 5);
SELECT sequence_number = :seq7 AS same, delivery_count, dead_letter_reason FROM sbq_peek('x/$deadletterqueue');
SELECT active_count, locked_count, dead_letter_count, sent, received, abandoned, dead_lettered
  FROM sbq_queue_stats WHERE queue = 'x';

SELECT sbq_delete_queue('c');
SELECT sbq_delete_queue('other');
SELECT sbq_delete_queue('x');
