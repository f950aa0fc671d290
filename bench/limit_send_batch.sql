-- bench/limit_send_batch.sql: the limit, send :n: one INSERT of :n rows per transaction
INSERT INTO lim_messages (body) SELECT 'bench message body: 0123456789 abcdefghijklmnopqrstuvwxyz ABCDEFGHIJKLMNOPQRSTUVWXYZ 0123456789 end' FROM generate_series(1, :n::int);
