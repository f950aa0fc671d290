-- bench/sbq_consume_batch.sql: sbqueue, receive :n (one transaction) + sbq_complete(uuid[]) (another)
SELECT count(*) AS got, coalesce(array_agg(lock_token), '{}') AS toks FROM sbq_receive('bench', :n::int) \gset
SELECT sbq_complete('bench', :toks::uuid[]) WHERE :got::int > 0;
