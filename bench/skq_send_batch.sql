-- bench/skq_send_batch.sql: SKIP LOCKED baseline, send :n per transaction
INSERT INTO skq_messages (body) SELECT 'bench message body: 0123456789 abcdefghijklmnopqrstuvwxyz ABCDEFGHIJKLMNOPQRSTUVWXYZ 0123456789 end' FROM generate_series(1, :n::int);
