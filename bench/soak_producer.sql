-- bench/soak_producer.sql: one send per transaction
\set r random(1, 1000000000)
SELECT sbq_send('soak', 'soak message ' || :r);
