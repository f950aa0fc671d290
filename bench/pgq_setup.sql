-- bench/pgq_setup.sql: the PgQ contender of bench/run.sh: a queue, one consumer,
-- and the consumer step. There is no pgqd: the consumer step calls
-- pgq.ticker() itself, which ticks when 1000 events are waiting or the last
-- tick is 20 ms old (queue_ticker_max_count / queue_ticker_max_lag).
CREATE EXTENSION IF NOT EXISTS pgq;
SELECT pgq.create_queue('bench');
SELECT pgq.set_queue_config('bench', 'ticker_max_count', '1000');
SELECT pgq.set_queue_config('bench', 'ticker_max_lag', '20 milliseconds');
SELECT pgq.set_queue_config('bench', 'ticker_idle_period', '1 second');
SELECT pgq.register_consumer('bench', 'bench_consumer');

-- One consumer step: the events of the next batch are read (counted) and the
-- batch finished; returns how many there were, 0 when no batch was ready.
CREATE OR REPLACE FUNCTION pgq_bench_consume() RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
    b bigint;
    n bigint;
BEGIN
    PERFORM pgq.ticker('bench');
    b := pgq.next_batch('bench', 'bench_consumer');
    IF b IS NULL THEN
        PERFORM pg_sleep(0.002);   -- nothing ticked yet: do not spin
        RETURN 0;
    END IF;
    SELECT count(*) INTO n FROM pgq.get_batch_events(b);
    PERFORM pgq.finish_batch(b);
    RETURN n;
END $$;

-- How many events the consumer has finished: the event sequence at its last tick.
CREATE OR REPLACE FUNCTION pgq_bench_consumed() RETURNS bigint LANGUAGE sql AS $$
    SELECT t.tick_event_seq FROM pgq.subscription s
      JOIN pgq.queue q ON q.queue_id = s.sub_queue
      JOIN pgq.consumer c ON c.co_id = s.sub_consumer
      JOIN pgq.tick t ON t.tick_queue = s.sub_queue AND t.tick_id = s.sub_last_tick
     WHERE q.queue_name = 'bench' AND c.co_name = 'bench_consumer'
$$;
