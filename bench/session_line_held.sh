#!/usr/bin/env bash
# bench/session_line_held.sh: what accept-next costs as sessions are drained
# while a snapshot is held open elsewhere.
#
#   bench/session_line_held.sh [SESSIONS] [CHUNKS]     defaults: 1000 sessions a chunk, 4 chunks
#
# A drained session with no state is forgotten at its release; its entry in
# the line's index (sessions_ready_idx) stays until vacuum, and while another
# transaction's snapshot may still see the row, no scan can mark the entry
# dead: every accept-next walks it. This drains CHUNKS x SESSIONS sessions of
# 10 messages one call per operation (bench/session_calls.sh's procedure,
# synchronous_commit on), in chunks, twice: with nothing else running, and
# with a REPEATABLE READ transaction held open from before the first chunk.
# Prints each chunk's mean accept-next and release in microseconds.
#
# Measures the sbqueue installed for $PG_CONFIG (it builds nothing). One
# throwaway server (scripts/pgserver.sh --preload, the maintenance worker and
# autovacuum off, so that nothing vacuums between the chunks).
set -euo pipefail
cd "$(dirname "$0")/.."
sessions=${1:-1000}
chunks=${2:-4}

PG_CONFIG=${PG_CONFIG:-/usr/lib/postgresql/${PG_MAJOR:-15}/bin/pg_config}
export PGBIN=${PGBIN:-$("$PG_CONFIG" --bindir)}
export PGUSER=postgres PGDATABASE=postgres
unset PGOPTIONS

work=$(mktemp -d /tmp/sbqueue-line-held.XXXXXX)
chmod 755 "$work"
holder=
cleanup() {
    [ -n "$holder" ] && kill "$holder" 2>/dev/null
    scripts/pgserver.sh stop "$work/srv" >/dev/null 2>&1 || true
    rm -rf "$work"
}
trap cleanup EXIT

port=$(scripts/pgserver.sh start "$work/srv" --preload)
export PGHOST="$work/srv" PGPORT="$port"
psql -X -q -c "ALTER SYSTEM SET sbqueue.enable_maintenance_worker = off" \
    -c "ALTER SYSTEM SET autovacuum = off" -c "SELECT pg_reload_conf()" >/dev/null
# the procedures of bench/session_calls.sh
sed -n '/^psql -X -q -v ON_ERROR_STOP=1 >\/dev\/null <<.SQL.$/,/^SQL$/p' bench/session_calls.sh \
    | sed '1d;$d' | psql -X -q -v ON_ERROR_STOP=1 >/dev/null

echo "bench/session_line_held.sh $sessions $chunks: mean µs a call, chunk by chunk of $sessions sessions of 10"
echo
echo "| snapshot held elsewhere | call | $(seq -s ' | ' 1 "$chunks" | sed 's/[0-9]\+/chunk &/g') |"
echo "|---|---|$(printf -- '---:|%.0s' $(seq 1 "$chunks"))"
for held in no yes; do
    psql -X -q -c "TRUNCATE timings" \
        -c "SELECT count(sbq_send('sq', 'b'::text, session_id => '$held' || lpad((i / 10)::text, 7, '0')))
              FROM generate_series(0, $((sessions * chunks)) * 10 - 1) i" \
        -c "VACUUM ANALYZE sbq.messages" -c "VACUUM ANALYZE sbq.sessions" >/dev/null
    if [ "$held" = yes ]; then
        psql -X -q -c "BEGIN ISOLATION LEVEL REPEATABLE READ" -c "SELECT count(*) FROM sbq.queues" \
            -c "SELECT pg_sleep(3600)" >/dev/null 2>&1 &
        holder=$!
        until [ "$(psql -X -At -c "SELECT count(*) FROM pg_stat_activity
                                    WHERE query LIKE 'SELECT pg_sleep(3600)%' AND state = 'active'")" = 1 ]; do
            sleep 0.1
        done
    fi
    for ((c = 1; c <= chunks; c++)); do
        psql -X -q -c "CALL drain_sessions($c, $sessions)" >/dev/null
    done
    for call in accept release; do
        echo "| $held | $call | $(psql -X -At -c "
            SELECT string_agg(round((seconds * 1e6)::numeric, 1)::text, ' | ' ORDER BY t.round)
              FROM timings t WHERE what = 'session: $call'") |"
    done
    if [ -n "$holder" ]; then
        psql -X -q -c "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
                        WHERE query LIKE 'SELECT pg_sleep(3600)%'" >/dev/null
        wait "$holder" 2>/dev/null || true
        holder=
    fi
    psql -X -q -c "VACUUM sbq.sessions" -c "VACUUM sbq.messages"
done
