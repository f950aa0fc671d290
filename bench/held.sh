#!/usr/bin/env bash
# bench/held.sh: the cycle of one message per transaction on a deep queue, clean and
# with a transaction held open elsewhere, and what the maintenance worker costs in each.
#
#   bench/held.sh [SECONDS] [DEPTH]      defaults: 120 s each phase, 100,000 deep
#
# Measures the sbqueue installed for $PG_CONFIG (it builds nothing: run `make install`
# first). One throwaway server (scripts/pgserver.sh --preload: fsync and
# synchronous_commit on, shared_buffers 1GB, max_wal_size 8GB as bench/run.sh), the
# maintenance worker on (a pass a second, as by default). A queue filled to DEPTH, then
# VACUUM ANALYZE; then bench/sbq_cycle.sql (send, receive, complete: three
# transactions) with pgbench -M prepared, 4 clients, for SECONDS clean; then as long
# again while another session holds a REPEATABLE READ transaction open (the one every
# completed message is kept for). For each phase: the cycles per second, the CPU
# seconds the database's maintenance worker used per minute (from /proc), and the
# table and its indexes at the end. Prints a Markdown table.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-120}
depth=${2:-100000}

PG_CONFIG=${PG_CONFIG:-/usr/lib/postgresql/${PG_MAJOR:-15}/bin/pg_config}
export PGBIN=${PGBIN:-$("$PG_CONFIG" --bindir)}
export PATH="$PGBIN:$PATH"
export PGUSER=postgres PGDATABASE=postgres
unset PGOPTIONS

work=$(mktemp -d /tmp/sbqueue-held.XXXXXX)
chmod 755 "$work"
holder=
cleanup() {
    [ -n "$holder" ] && kill "$holder" 2>/dev/null || true
    scripts/pgserver.sh stop "$work/srv" >/dev/null 2>&1 || true
    rm -rf "$work"
}
trap cleanup EXIT
log() { echo "held: $(date +%H:%M:%S) $*" >&2; }

port=$(scripts/pgserver.sh start "$work/srv" --preload)
export PGHOST="$work/srv" PGPORT="$port"
psql -X -q -c "ALTER SYSTEM SET shared_buffers = '1GB'" -c "ALTER SYSTEM SET max_wal_size = '8GB'"
scripts/pgserver.sh stop "$work/srv" >/dev/null
scripts/pgserver.sh start "$work/srv" "$port" --preload >/dev/null
q() { psql -X -At -v ON_ERROR_STOP=1 -c "$1"; }

q "CREATE EXTENSION sbqueue" >/dev/null
q "SELECT sbq_create_queue('bench')" >/dev/null
log "filling to $depth"
left=$depth
while [ "$left" -gt 0 ]; do
    k=$((left < 5000 ? left : 5000))
    q "SELECT count(*) FROM sbq_send_batch('bench', array_fill('bench message body: 0123456789 abcdefghijklmnopqrstuvwxyz ABCDEFGHIJKLMNOPQRSTUVWXYZ 0123456789 end'::text, ARRAY[$k]))" >/dev/null
    left=$((left - k))
done
q "VACUUM ANALYZE sbq.messages" >/dev/null

# the maintenance worker of this database: its CPU time in clock ticks
worker_pid() {
    for _ in $(seq 1 100); do
        p=$(q "SELECT pid FROM pg_stat_activity WHERE backend_type = 'sbqueue maintenance' AND datname = 'postgres'")
        [ -n "$p" ] && { echo "$p"; return; }
        sleep 0.1
    done
    echo "held: no maintenance worker" >&2
    exit 1
}
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
hz=$(getconf CLK_TCK)

phase() {
    local name=$1 pid t0 t1 rate
    pid=$(worker_pid)
    t0=$(ticks "$pid")
    rate=$(pgbench -n -M prepared -c 4 -j 2 -T "$secs" -f bench/sbq_cycle.sql 2>&1 |
        sed -n 's/^tps = \([0-9.]*\) .*/\1/p')
    t1=$(ticks "$pid")
    sizes=$(q "SELECT round(pg_relation_size('sbq.messages') / 1048576.0, 1) || ' | ' ||
                      round(pg_indexes_size('sbq.messages') / 1048576.0, 1)")
    printf '| %s | %.0f | %.2f | %s |\n' "$name" "$rate" \
        "$(awk -v d=$((t1 - t0)) -v hz="$hz" -v s="$secs" 'BEGIN {print d / hz * 60 / s}')" "$sizes"
}

log "clean, $secs s"
clean=$(phase clean)
log "a transaction held open, $secs s"
psql -X -q -c "BEGIN ISOLATION LEVEL REPEATABLE READ" -c "SELECT count(*) FROM sbq.queues" \
    -c "SELECT pg_sleep(100000)" >/dev/null 2>&1 &
holder=$!
sleep 1
held=$(phase "transaction held")
kill "$holder" 2>/dev/null || true
holder=

echo "bench/held.sh $secs $depth: cycle of 1 (bench/sbq_cycle.sql), 4 clients, $depth deep"
echo
echo "| phase | cycles/s | maintenance worker CPU s/min | heap MB | indexes MB |"
echo "|---|---:|---:|---:|---:|"
echo "$clean"
echo "$held"
