-- bench/baseline_skip_locked.sql: the plain-SQL peek-lock baseline of bench/run.sh.
--
-- One table, one row per message; a receive claims the lowest available ids
-- with FOR UPDATE SKIP LOCKED and writes a fresh lock token, a lock expiry and
-- the delivery count in the same UPDATE; a settlement deletes by id and token
-- while the lock is valid. The lock columns are in no index, so the claim can
-- be a HOT update (fillfactor 80, as sbq.messages has). This is what a
-- competent application writes without an extension; the pgbench scripts
-- bench/skq_*.sql run exactly these statements (prepared, -M prepared):
--
--   receive n (n = 1 or the batch size):
--     UPDATE skq_messages m
--        SET lock_token = gen_random_uuid(),
--            locked_until = clock_timestamp() + interval '30 seconds',
--            delivery_count = m.delivery_count + 1
--      WHERE m.id IN (SELECT id FROM skq_messages
--                      WHERE locked_until IS NULL OR locked_until <= clock_timestamp()
--                      ORDER BY id FOR UPDATE SKIP LOCKED LIMIT n)
--     RETURNING m.id, m.lock_token, m.body, m.delivery_count;
--
--   settle (complete) one:   DELETE FROM skq_messages
--                             WHERE id = $1 AND lock_token = $2 AND locked_until > clock_timestamp();
--   settle (complete) many:  DELETE FROM skq_messages
--                             WHERE id = ANY($1) AND lock_token = ANY($2)
--                               AND locked_until > clock_timestamp();
--
-- The limit contender (bench/limit_*.sql) is the same table shape without the
-- lock columns: a message is one INSERT and one DELETE by primary key.

SET client_min_messages = warning;
DROP TABLE IF EXISTS skq_messages;
CREATE TABLE skq_messages (
    id bigserial PRIMARY KEY,
    enqueued_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    lock_token uuid,
    locked_until timestamptz,
    delivery_count integer NOT NULL DEFAULT 0,
    body text NOT NULL
) WITH (fillfactor = 80);

DROP TABLE IF EXISTS lim_messages;
CREATE TABLE lim_messages (
    id bigserial PRIMARY KEY,
    enqueued_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    body text NOT NULL
);
-- the receive side of the limit takes ids in order from this sequence
DROP SEQUENCE IF EXISTS lim_take_seq;
CREATE SEQUENCE lim_take_seq;
