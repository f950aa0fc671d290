-- bench/limit_cycle_batch.sql: the limit, full cycle :n: INSERT :n rows + DELETE them by primary key in one transaction
BEGIN;
WITH i AS (INSERT INTO lim_messages (body) SELECT 'bench message body: 0123456789 abcdefghijklmnopqrstuvwxyz ABCDEFGHIJKLMNOPQRSTUVWXYZ 0123456789 end' FROM generate_series(1, :n::int) RETURNING id) SELECT array_agg(id) AS ids FROM i \gset
DELETE FROM lim_messages WHERE id = ANY (:ids::bigint[]);
END;
