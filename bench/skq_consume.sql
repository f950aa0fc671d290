-- bench/skq_consume.sql: SKIP LOCKED baseline, receive 1 (one transaction) + complete it (another).
-- Run with -D tok=00000000-0000-0000-0000-000000000000; id 0 settles nothing when the receive got nothing.
\set id 0
UPDATE skq_messages m SET lock_token = gen_random_uuid(), locked_until = clock_timestamp() + interval '30 seconds', delivery_count = m.delivery_count + 1 WHERE m.id IN (SELECT id FROM skq_messages WHERE locked_until IS NULL OR locked_until <= clock_timestamp() ORDER BY id FOR UPDATE SKIP LOCKED LIMIT 1) RETURNING m.id, m.lock_token AS tok \aset
DELETE FROM skq_messages WHERE id = :id AND lock_token = :tok::uuid AND locked_until > clock_timestamp();
