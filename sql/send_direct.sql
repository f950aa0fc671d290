-- send_direct: a DBA's partial index on sbq.messages whose predicate calls a function
-- of theirs. Opening the index after its cached form was dropped (here: the index made
-- in an earlier transaction, then ANALYZE) folds the predicate; a plain send stores
-- without SQL (src/send_direct.c), and must still run that fold with search_path
-- pinned to pg_catalog, pg_temp, as the INSERT did: the store runs as the owner of the
-- tables, so a role that may only send must not get a function of its own run.
-- (Committed steps: pgTAP's send_direct runs in one transaction, where an index made
-- in it keeps its cached form.)
SELECT queue FROM sbq_create_queue('sdx');
CREATE TABLE regress.sdx_marks (who text);
GRANT INSERT ON regress.sdx_marks TO PUBLIC;
-- (LOGIN: through a Citus coordinator, the call runs on the queue's node over a
-- connection Citus makes as the role)
CREATE ROLE sdx_sender LOGIN;
SELECT sbq_grant('sdx', 'sdx_sender', ARRAY['send']);
CREATE SCHEMA sdx_evil AUTHORIZATION sdx_sender;
CREATE FUNCTION regress.sdx_probe() RETURNS int LANGUAGE sql IMMUTABLE AS 'SELECT 1';
CREATE FUNCTION regress.sdx_reserved() RETURNS int LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    RETURN sdx_probe() + 1000000;
EXCEPTION WHEN undefined_function THEN
    RETURN 1000000;
END $$;
CREATE INDEX sdx_reserved_idx ON sbq.messages (queue_id) WHERE queue_id <> regress.sdx_reserved();
SET ROLE sdx_sender;
CREATE FUNCTION sdx_evil.sdx_probe() RETURNS int LANGUAGE plpgsql AS $$
BEGIN INSERT INTO regress.sdx_marks VALUES ('probe'); RETURN 1; END $$;
SELECT sbq_send('sdx', 'warm'::text) > 0 AS sent;
RESET ROLE;
ANALYZE sbq.messages;
SET ROLE sdx_sender;
SET search_path = sdx_evil, regress, public, pg_catalog;
SELECT public.sbq_send('sdx', 'after analyze'::text) > 0 AS sent;
RESET ROLE;
RESET search_path;
-- nothing of the sender's ran
SELECT count(*) AS marks FROM regress.sdx_marks;
SELECT count(*) AS sent FROM sbq_peek('sdx', 10);
DROP INDEX sbq.sdx_reserved_idx;
DROP SCHEMA sdx_evil CASCADE;
SELECT sbq_revoke('sdx', 'sdx_sender', ARRAY['send']);
SELECT sbq_delete_queue('sdx');
DROP ROLE sdx_sender;

-- counters: a backend's first store of a queue's counts inserts its row, the next ones
-- update it (on one server without the statement: src/counts_direct.c); what two stores
-- (here sbq_maintain() storing what the preload gathered) add up to is what was sent
SELECT queue FROM sbq_create_queue('sdc');
SELECT count(sbq_send('sdc', 'c' || g)) AS sent FROM generate_series(1, 3) g;
SELECT (sbq_maintain()) IS NOT NULL AS maintained;
SELECT count(sbq_send('sdc', 'c' || g)) AS sent FROM generate_series(1, 4) g;
SELECT (sbq_maintain()) IS NOT NULL AS maintained;
SELECT sum(c.sent) AS stored_sent FROM sbq.queue_counters c
 WHERE c.queue_id = (SELECT q.queue_id FROM sbq.queues q WHERE q.name = 'sdc');
SELECT sent FROM sbq_queue_stats WHERE queue = 'sdc';
SELECT sbq_delete_queue('sdc');

-- a batch is stored in groups (src/send_direct.c: at most 100 rows and about 1 MB of
-- bodies each, put into the heap together, then indexed): 250 messages, each with its
-- own body and number, in order, found through the primary key and the receive index
SELECT queue FROM sbq_create_queue('sdb');
SELECT count(*) AS sent,
       bool_and(s.prev IS NULL OR s.seq > s.prev) AS increasing_in_order
  FROM (SELECT seq, lag(seq) OVER () AS prev
          FROM sbq_send_batch('sdb', ARRAY(SELECT 'b' || g FROM generate_series(1, 250) g)) seq) s;
SELECT count(*) AS received,
       bool_and(convert_from(r.body, 'UTF8') = 'b' || r.i) AS bodies_in_order
  FROM (SELECT body, row_number() OVER (ORDER BY sequence_number) AS i
          FROM sbq_receive('sdb', 250, receive_mode => 'receive_and_delete')) r;
-- bodies of 300,000 bytes: groups of 4, 4 and 1; each body whole, in order
SELECT count(*) AS sent FROM sbq_send_batch('sdb',
    ARRAY(SELECT repeat(chr(64 + g), 150000) || md5(g::text) || repeat('.', 149968)
            FROM generate_series(1, 9) g));
SELECT string_agg(left(convert_from(body, 'UTF8'), 1), '' ORDER BY sequence_number) AS firsts,
       bool_and(octet_length(body) = 300000) AS whole,
       bool_and(substr(convert_from(body, 'UTF8'), 150001, 32)
                = md5((ascii(convert_from(body, 'UTF8')) - 64)::text)) AS own_middles
  FROM sbq_peek('sdb', 10);
SELECT count(*) AS purged FROM (SELECT sbq_purge_queue('sdb')) p;
-- a row refused by a constraint of the DBA's, at row 150 (a constraint that runs code:
-- the batch is stored row by row): the batch fails as the INSERT did, with the
-- constraint's SQLSTATE, and nothing of it stays
ALTER TABLE sbq.messages ADD CONSTRAINT sdb_not_seven CHECK (octet_length(body) <> 7);
-- (the SQLSTATE alone: a distributed installation names the shard in the message)
DO $$
BEGIN
    PERFORM sbq_send_batch('sdb',
        ARRAY(SELECT CASE WHEN g = 150 THEN 'seven!!' ELSE 'b' || g END FROM generate_series(1, 250) g));
EXCEPTION WHEN check_violation THEN
    RAISE NOTICE 'refused: %', SQLSTATE;
END $$;
SELECT count(*) AS stored FROM sbq_peek('sdb', 10);
-- and alone, in a batch of two
DO $$
BEGIN
    PERFORM sbq_send_batch('sdb', ARRAY['ok', 'seven!!']);
EXCEPTION WHEN check_violation THEN
    RAISE NOTICE 'refused: %', SQLSTATE;
END $$;
ALTER TABLE sbq.messages DROP CONSTRAINT sdb_not_seven;
SELECT count(*) AS stored FROM sbq_peek('sdb', 10);
SELECT sbq_delete_queue('sdb');
