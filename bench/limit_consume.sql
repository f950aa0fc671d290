-- bench/limit_consume.sql: the limit, receive + complete 1: one DELETE by primary key
DELETE FROM lim_messages WHERE id = (SELECT nextval('lim_take_seq'));
