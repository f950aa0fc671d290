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
