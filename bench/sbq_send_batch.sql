-- bench/sbq_send_batch.sql: sbqueue, send :n per transaction (sbq_send_batch)
SELECT count(*) FROM sbq_send_batch('bench', array_fill('bench message body: 0123456789 abcdefghijklmnopqrstuvwxyz ABCDEFGHIJKLMNOPQRSTUVWXYZ 0123456789 end'::text, ARRAY[:n::int]));
