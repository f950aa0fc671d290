-- bench/one_transaction.sql: :n sends, receives and completes on one queue in
-- ONE transaction; prints the time per iteration. A cost that grows with :n
-- is work that scales with what the transaction did before.
--   psql -v n=8000 -f bench/one_transaction.sql
SELECT sbq_delete_queue('bench_one_tx') FROM sbq_queues WHERE queue = 'bench_one_tx';
SELECT sbq_create_queue('bench_one_tx') IS NOT NULL AS created;
SET sbq.bench_n = :n;
DO $$DECLARE t0 timestamptz; n int := current_setting('sbq.bench_n')::int; m record; BEGIN
  t0 := clock_timestamp();
  FOR i IN 1..n LOOP
    PERFORM sbq_send('bench_one_tx', 'x');
    FOR m IN SELECT lock_token FROM sbq_receive('bench_one_tx') LOOP
      PERFORM sbq_complete('bench_one_tx', m.lock_token);
    END LOOP;
  END LOOP;
  RAISE NOTICE 'n=% per iteration % us', n,
    round(extract(epoch FROM clock_timestamp() - t0) * 1e6 / n);
END $$;
SELECT sbq_delete_queue('bench_one_tx');
