#!/usr/bin/env bash
# bench/small_beside_big.sh: what a call on a small queue costs beside one large queue.
#
#   bench/small_beside_big.sh [BIG] [CALLS]     defaults: 1,000,000 messages, 50 calls
#
# The statements that read a queue's head have generic plans, which the table's
# statistics decide: beside one large queue the planner expected most rows to be the
# queue's and could walk the primary key from the starting number, filtering by
# queue, instead of reading the queue's own entries of the receive index
# (src/plan_key.c). This measures the calls whose plans read a head, on a queue of a
# few messages sent before the large queue's BIG (so that every number of the large
# queue is above them), one of them held under a lock (5 minutes, the longest a queue
# allows) taken before the run, so that the small queue's head stays below the large
# queue's rows:
#   peek        sbq_peek(small, 10)
#   receive     sbq_receive(small, 10) and sbq_abandon of what it got, in one
#               transaction (the queue has 2 messages free: the receive asks for more;
#               its max_delivery_count is high enough that they stay)
#   row locks   the same with sbqueue.memory_locks = off (locks stored in the rows)
#   maintain    sbq_maintain() (its look at the locks stored in the rows)
# CALLS of each in one connection after 10 warm-up ones (the plans made), each timed
# with clock_timestamp() in the server: the median and the 90th percentile, in ms.
#
# Measures the sbqueue installed for $PG_CONFIG (it builds nothing: run `make install`
# first; to measure another build, point PG_CONFIG at a relocated copy of PostgreSQL's
# trees it was installed into, as bench/ab.sh makes). One throwaway server
# (scripts/pgserver.sh --preload, shared_buffers 1GB, the maintenance worker off).
# Prints a Markdown table.
set -euo pipefail
cd "$(dirname "$0")/.."
big=${1:-1000000}
calls=${2:-50}

PG_CONFIG=${PG_CONFIG:-/usr/lib/postgresql/${PG_MAJOR:-15}/bin/pg_config}
export PGBIN=${PGBIN:-$("$PG_CONFIG" --bindir)}
export PATH="$PGBIN:$PATH"
export PGUSER=postgres PGDATABASE=postgres
unset PGOPTIONS

work=$(mktemp -d /tmp/sbqueue-small.XXXXXX)
chmod 755 "$work"
cleanup() {
    scripts/pgserver.sh stop "$work/srv" >/dev/null 2>&1 || true
    rm -rf "$work"
}
trap cleanup EXIT
log() { echo "small_beside_big: $(date +%H:%M:%S) $*" >&2; }

port=$(scripts/pgserver.sh start "$work/srv" --preload)
export PGHOST="$work/srv" PGPORT="$port"
psql -X -q -v ON_ERROR_STOP=1 -c "ALTER SYSTEM SET shared_buffers = '1GB'" \
    -c "ALTER SYSTEM SET sbqueue.enable_maintenance_worker = off"
scripts/pgserver.sh stop "$work/srv"
port=$(scripts/pgserver.sh start "$work/srv" "$port" --preload)

log "filling: 3 + 3 small messages, then $big in the large queue"
psql -X -q -v ON_ERROR_STOP=1 >/dev/null <<SQL
CREATE EXTENSION sbqueue;
SELECT sbq_create_queue('big');
SELECT sbq_create_queue('small', lock_duration => '5 minutes', max_delivery_count => 1000000);
SELECT sbq_create_queue('small_rows', lock_duration => '5 minutes', max_delivery_count => 1000000);
SELECT count(*) FROM sbq_send_batch('small', array_fill('s'::text, ARRAY[3]));
SELECT count(*) FROM sbq_send_batch('small_rows', array_fill('r'::text, ARRAY[3]));
SELECT count(*) FROM generate_series(1, ($big + 4999) / 5000) g,
    LATERAL sbq_send_batch('big', array_fill(('big message ' || g)::text, ARRAY[least(5000, $big - (g - 1) * 5000)]));
VACUUM ANALYZE sbq.messages;
CREATE TABLE timings (what text, ms float8);
SQL

# the held locks: the first message of each small queue (a lock outlives its
# connection: in shared memory, or stored in the row)
psql -X -q -v ON_ERROR_STOP=1 -c "SELECT count(*) FROM sbq_receive('small', 1)" >/dev/null
PGOPTIONS="-c sbqueue.memory_locks=off" psql -X -q -v ON_ERROR_STOP=1 \
    -c "SELECT count(*) FROM sbq_receive('small_rows', 1)" >/dev/null

log "measuring: $calls calls of each"
psql -X -q -v ON_ERROR_STOP=1 >/dev/null <<SQL
CREATE PROCEDURE measure(what text, n int, sql text) LANGUAGE plpgsql AS \$\$
DECLARE t0 timestamptz;
BEGIN
    FOR i IN 1 .. n + 10 LOOP
        t0 := clock_timestamp();
        EXECUTE sql;
        IF i > 10 THEN
            INSERT INTO timings VALUES (what, extract(epoch FROM clock_timestamp() - t0) * 1000);
        END IF;
        COMMIT;
    END LOOP;
END \$\$;
CALL measure('peek', $calls, \$q\$SELECT count(*) FROM sbq_peek('small', 10)\$q\$);
CALL measure('receive', $calls,
    \$q\$SELECT count(sbq_abandon('small', lock_token)) FROM sbq_receive('small', 10)\$q\$);
SET sbqueue.memory_locks = off;
CALL measure('row locks', $calls,
    \$q\$SELECT count(sbq_abandon('small_rows', lock_token)) FROM sbq_receive('small_rows', 10)\$q\$);
CALL measure('maintain', $calls, \$q\$SELECT count(*) FROM sbq_maintain()\$q\$);
SQL

echo "bench/small_beside_big.sh $big $calls: ms per call on a queue of 3 messages (one held) beside $big queued in another, $(psql -XAtc 'SHOW server_version' | cut -d' ' -f1)"
echo
echo "| call | median ms | 90th percentile ms |"
echo "|---|---:|---:|"
psql -X -q -At -F ' | ' -c "
    SELECT '| ' || what, round(percentile_cont(0.5) WITHIN GROUP (ORDER BY ms)::numeric, 3),
           round(percentile_cont(0.9) WITHIN GROUP (ORDER BY ms)::numeric, 3) || ' |'
      FROM timings GROUP BY what ORDER BY min(ctid)"
