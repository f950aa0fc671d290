-- bench/skq_send.sql: SKIP LOCKED baseline, send 1 per transaction
INSERT INTO skq_messages (body) VALUES ('bench message body: 0123456789 abcdefghijklmnopqrstuvwxyz ABCDEFGHIJKLMNOPQRSTUVWXYZ 0123456789 end');
