-- bench/pgq_send.sql: PgQ, insert_event 1 per transaction
SELECT pgq.insert_event('bench', 'm', 'bench message body: 0123456789 abcdefghijklmnopqrstuvwxyz ABCDEFGHIJKLMNOPQRSTUVWXYZ 0123456789 end');
