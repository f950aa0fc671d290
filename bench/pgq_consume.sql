-- bench/pgq_consume.sql: PgQ, the single consumer: tick if due, next_batch, get_batch_events, finish_batch
-- (one transaction; pgq_bench_consume() is in bench/pgq_setup.sql)
SELECT pgq_bench_consume();
