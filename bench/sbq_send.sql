-- bench/sbq_send.sql: sbqueue, send 1 per transaction
SELECT sbq_send('bench', 'bench message body: 0123456789 abcdefghijklmnopqrstuvwxyz ABCDEFGHIJKLMNOPQRSTUVWXYZ 0123456789 end'::text);
