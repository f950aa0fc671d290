-- bench/soak_consumer.sql: one receive and its settlement (see soak_setup.sql)
SELECT soak_consume();
