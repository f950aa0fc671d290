-- bench/limit_cycle.sql: the limit, full cycle 1: INSERT + DELETE by primary key in one transaction
BEGIN;
INSERT INTO lim_messages (body) VALUES ('bench message body: 0123456789 abcdefghijklmnopqrstuvwxyz ABCDEFGHIJKLMNOPQRSTUVWXYZ 0123456789 end') RETURNING id \gset
DELETE FROM lim_messages WHERE id = :id;
END;
