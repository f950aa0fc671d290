-- bench/maintain_pass.sql: what one maintenance pass costs in a database whose
-- 1,000 queues and 50 topics (each with a subscription) all hold a message, so
-- that each has its entry in the shared table of queues.
--
--   psql -X -d postgres -f bench/maintain_pass.sql      (on a throwaway server,
--       started --preload with the maintenance worker off; makes database pab)
--
-- Prints the time of three DO blocks of 50 passes each (ms / 50 = one pass).
\set QUIET on
DROP DATABASE IF EXISTS pab;
CREATE DATABASE pab;
\c pab
CREATE EXTENSION sbqueue;
SELECT count(sbq_create_queue('q' || g)) FROM generate_series(1, 1000) g;
SELECT count(sbq_create_topic('t' || g)) FROM generate_series(1, 50) g;
SELECT count(sbq_create_subscription('t' || g, 's')) FROM generate_series(1, 50) g;
SELECT count(sbq_send('q' || g, 'x'::text)) FROM generate_series(1, 1000) g;
SELECT count(sbq_send('t' || g, 'x'::text)) FROM generate_series(1, 50) g;
SELECT sbq_maintain() IS NOT NULL;
SELECT sbq_maintain() IS NOT NULL;
\timing on
DO $$BEGIN FOR i IN 1 .. 50 LOOP PERFORM sbq_maintain(); END LOOP; END$$;
DO $$BEGIN FOR i IN 1 .. 50 LOOP PERFORM sbq_maintain(); END LOOP; END$$;
DO $$BEGIN FOR i IN 1 .. 50 LOOP PERFORM sbq_maintain(); END LOOP; END$$;
\timing off
\c postgres
DROP DATABASE pab;
