#!/usr/bin/env bash
# bench/sessions.sh: what sessions cost, side by side in one run on one server.
#
#   bench/sessions.sh [ROUNDS]            default 5; about 2 minutes
#
# Measures the sbqueue installed for $PG_CONFIG (it builds nothing: run
# `make install` first). Starts a throwaway server (scripts/pgserver.sh
# --preload: fsync on, synchronous_commit on; here also shared_buffers 1GB,
# max_wal_size 8GB as bench/run.sh, sbqueue.max_locks 262144 with 131072 for
# one database (B holds 99,000 session locks at once, each an entry of that
# table), and pg_stat_statements preloaded with
# track = none, which only the diagnostic runs turn to all) on the first free
# port of 56200-56299 (SESS_PORT to choose one), and bench/sessions.py
# measures on it:
#
#   A  throughput, 4 clients (processes, one connection each, autocommit: one
#      transaction per call, as a client without explicit transactions does):
#        session  1,000 sessions x 10 messages in a queue with requires_session;
#                 each client loops: sbq_accept_session(q) (the next session;
#                 none: done), sbq_receive_session(q, token, 10) and
#                 sbq_complete(q, uuid[]) of what came until a batch comes
#                 back short (so a session of 10 takes a last, empty,
#                 receive), sbq_release_session(q, token)
#        plain    the same 10,000 messages in a plain queue; each client loops
#                 sbq_receive(q, 10) + sbq_complete(q, uuid[]) until a
#                 receive returns nothing
#      each with synchronous_commit on and (set per connection) off; and the
#      session loop once more on 100 sessions x 100 messages (the same 10,000;
#      synchronous_commit on), for what the per-session calls cost. The
#      messages are sent before each run (not timed; the session ones
#      interleaved, one to each session in turn), then VACUUM ANALYZE and a
#      CHECKPOINT. Time: the first client's start to the last one's end; WAL
#      flushes from pg_stat_wal.wal_sync, full-page images from pg_walinspect's
#      pg_get_wal_stats over the run's LSNs. ROUNDS rounds of the five cells, the
#      order reversed every other round; the median. Then one more run of each
#      contender with pg_stat_statements.track = all, for where the time goes
#      (not in the figures).
#   B  accept-next latency, one connection, accept + release of the next
#      session 500 times (after 50 warm-up ones), in blocks of 100 taking
#      turns between two databases:
#        b10      a session queue with 10 sessions, one message each
#        b100k    100,000 sessions with one message each (sent in one
#                 transaction), 99,000 of them accepted by name in one
#                 transaction (lock_duration 5 minutes, the longest), every
#                 100th left free: 1,000 free sessions
#      Latency per call (p50, p95), WAL per call (pg_current_wal_lsn() read
#      before and after each call, outside the timing; autovacuum is off from
#      a VACUUM ANALYZE and a CHECKPOINT before the blocks to the end of the
#      accepts, so that its WAL does not count); then in b100k 500
#      accepts of a new session each (none released). Before those, b100k is
#      measured once with the statistics of sbq.sessions taken before the
#      99,000 were held (autovacuum off for that table until then): 100 x
#      accept, sbq_receive_session, release, and the same after VACUUM
#      ANALYZE. Then pg_stat_statements (track = all) over 100 more accept +
#      release per database, and EXPLAIN ANALYZE of accept-next's statements.
#   C  one receive of 10, 100, 1,000 and 3,000 messages: sbq_receive_session
#      on one session (1,000 other sessions wait in the queue with 10 messages
#      each) against sbq_receive on a plain queue (memory_locks on, off).
#
# Prints a Markdown report. Exits 1 when a run did not complete every message
# or left rows behind (or a receive of C returned fewer than asked). Environment: SESS_PORT, SESS_KEEP (a directory to copy
# the server log into), SESS_ARGS (more options for bench/sessions.py, to try
# it out small: --sessions 100 --big 10000 --held 9900 --accepts 200).
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-5}
PYTHON=${PYTHON:-/usr/bin/python3}      # Debian's, with python3-psycopg
command="bench/sessions.sh $*"
command=${command% }

PG_CONFIG=${PG_CONFIG:-/usr/lib/postgresql/${PG_MAJOR:-15}/bin/pg_config}
export PG_CONFIG
export PGBIN=${PGBIN:-$("$PG_CONFIG" --bindir)}
export PATH="$PGBIN:$PATH"
export PGUSER=postgres PGDATABASE=postgres
unset PGOPTIONS

"$PYTHON" -c 'import psycopg' 2>/dev/null ||
    { echo "sessions: $PYTHON has no psycopg (apt-get install python3-psycopg)" >&2; exit 1; }

port=${SESS_PORT:-}
if [ -z "$port" ]; then
    for p in $(seq 56200 56299); do
        if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then port=$p; break; fi
    done
fi
[ -n "$port" ] || { echo "sessions: no free port in 56200-56299" >&2; exit 1; }

work=$(mktemp -d /tmp/sbqueue-sessions.XXXXXX)
chmod 755 "$work"
cleanup() {
    scripts/pgserver.sh stop "$work/pg" >/dev/null 2>&1 || true
    if [ -n "${SESS_KEEP:-}" ] && [ -f "$work/pg/server.log" ]; then
        cp "$work/pg/server.log" "$SESS_KEEP/sessions-server.log"
    fi
    rm -rf "$work"
}
trap cleanup EXIT
log() { echo "sessions: $(date +%H:%M:%S) $*" >&2; }

load="$(cut -d' ' -f1-3 /proc/loadavg)"
port=$(scripts/pgserver.sh start "$work/pg" "$port" --preload)
export PGHOST="$work/pg" PGPORT="$port"
psql -X -q -v ON_ERROR_STOP=1 -c "ALTER SYSTEM SET shared_buffers = '1GB'" \
    -c "ALTER SYSTEM SET max_wal_size = '8GB'" \
    -c "ALTER SYSTEM SET sbqueue.max_locks = 262144" \
    -c "ALTER SYSTEM SET sbqueue.max_locks_per_database = 131072" \
    -c "ALTER SYSTEM SET shared_preload_libraries = 'sbqueue', 'pg_stat_statements'"
scripts/pgserver.sh stop "$work/pg"
log_from=$(stat -c %s "$work/pg/server.log")
port=$(scripts/pgserver.sh start "$work/pg" "$port" --preload)
psql -X -q -v ON_ERROR_STOP=1 -c "ALTER SYSTEM SET pg_stat_statements.track = 'none'" \
    -c "SELECT pg_reload_conf()" >/dev/null
log "server on port $port"

psql -X -q -v ON_ERROR_STOP=1 -c "CREATE EXTENSION sbqueue" -c "CREATE EXTENSION pg_stat_statements" \
    -c "CREATE EXTENSION pg_walinspect" \
    -c "SELECT sbq_create_queue('plain')" \
    -c "SELECT sbq_create_queue('sess', requires_session => true)" \
    -c "SELECT sbq_create_queue('batchplain')" \
    -c "SELECT sbq_create_queue('batchsess', requires_session => true, lock_duration => '5 minutes')" \
    -c "CREATE DATABASE b10" -c "CREATE DATABASE b100k" >/dev/null
for db in b10 b100k; do
    psql -X -q -v ON_ERROR_STOP=1 -d "$db" -c "CREATE EXTENSION sbqueue" \
        -c "CREATE EXTENSION pg_stat_statements" -c "CREATE EXTENSION pg_walinspect" \
        -c "SELECT sbq_create_queue('sq', requires_session => true, lock_duration => '5 minutes')" >/dev/null
done

started=$(date +%s)
rc=0
"$PYTHON" bench/sessions.py --rounds "$rounds" --command "$command" ${SESS_ARGS:-} \
    --conditions "Load average before the server started: $load." || rc=$?
if tail -c +"$((log_from + 1))" "$work/pg/server.log" | grep -E ' (WARNING|ERROR|FATAL|PANIC): ' >&2; then
    log "the server log has the warnings or errors above"
fi
echo
echo "($command: $(($(date +%s) - started)) s; $(date -u +%Y-%m-%d))"
exit "$rc"
