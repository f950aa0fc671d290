-- bench/sbq_cycle_batch.sql: sbqueue, full cycle :n: send :n, receive :n, complete them (three transactions)
SELECT count(*) FROM sbq_send_batch('bench', array_fill('bench message body: 0123456789 abcdefghijklmnopqrstuvwxyz ABCDEFGHIJKLMNOPQRSTUVWXYZ 0123456789 end'::text, ARRAY[:n::int]));
SELECT count(*) AS got, coalesce(array_agg(lock_token), '{}') AS toks FROM sbq_receive('bench', :n::int) \gset
SELECT sbq_complete('bench', :toks::uuid[]) WHERE :got::int > 0;
