-- bench/limit_send.sql: the limit, send 1: one INSERT per transaction
INSERT INTO lim_messages (body) VALUES ('bench message body: 0123456789 abcdefghijklmnopqrstuvwxyz ABCDEFGHIJKLMNOPQRSTUVWXYZ 0123456789 end');
