-- bench/pgq_send_batch.sql: PgQ, insert_event :n per transaction
SELECT count(pgq.insert_event('bench', 'm', 'bench message body: 0123456789 abcdefghijklmnopqrstuvwxyz ABCDEFGHIJKLMNOPQRSTUVWXYZ 0123456789 end')) FROM generate_series(1, :n::int);
