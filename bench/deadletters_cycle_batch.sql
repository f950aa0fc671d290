-- bench/deadletters_cycle_batch.sql: bench/sbq_cycle_batch.sql on the queue :q (bench/deadletters.sh):
-- send :n, receive :n, complete them (three transactions). Run with -M prepared, -D q=QUEUE, -D n=N.
SELECT count(*) FROM sbq_send_batch(:q, array_fill('bench message body: 0123456789 abcdefghijklmnopqrstuvwxyz ABCDEFGHIJKLMNOPQRSTUVWXYZ 0123456789 end'::text, ARRAY[:n::int]));
SELECT count(*) AS got, coalesce(array_agg(lock_token), '{}') AS toks FROM sbq_receive(:q, :n::int) \gset
SELECT sbq_complete(:q, :toks::uuid[]) WHERE :got::int > 0;
