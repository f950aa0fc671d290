-- bench/limit_consume_batch.sql: the limit, receive + complete :n: one DELETE of :n primary keys
DELETE FROM lim_messages WHERE id = ANY (ARRAY(SELECT nextval('lim_take_seq') FROM generate_series(1, :n::int)));
