#!/usr/bin/env bash
# bench/run.sh: sbqueue against its baselines, side by side in one run.
#
#   bench/run.sh [--quick|--full] [--write]
#
#   --quick (default)  about a minute: 3 s cells, one run each, four workloads
#                      at 4 clients, the plan probe, 100 wake-ups
#   --full             10 s cells, the median of 3 interleaved runs, every
#                      workload (send 1 / batch, receive + complete 1 / batch,
#                      full cycle 1 / batch at 1, 4, 8 clients, one cell with
#                      synchronous_commit = off), the plan probe, a 100,000-deep
#                      queue (BENCH_DEEP_DEPTH) cycled BENCH_DEEP_MINUTES (default
#                      5) minutes clean and as long again with a transaction held
#                      open, then watched for at most 2 minutes for its dead rows
#                      to go, 1,000 wake-ups, the cycle beside 1,000,000 dead
#                      letters (bench/deadletters.sh 10 3) and the cycle without
#                      the preload (bench/no_preload.sh HEAD 10 3), and what
#                      reading sbq_queue_stats and sbq_metrics costs for 100 queues
#                      of 1,000 and of 100,000 messages each, 10,000,000 in all
#                      (bench/stats.sh 100 "1000 100000" 3); about an hour
#   --write            also write the report into BENCHMARKS.md, as the section
#                      "Throughput against the baselines" (replacing an earlier one)
#
# Contenders, all in one throwaway server (scripts/pgserver.sh --preload: fsync
# on, synchronous_commit on) with the same settings:
#   limit        one INSERT + one DELETE by primary key per message (bench/limit_*.sql)
#   SKIP LOCKED  a plain-SQL peek-lock table (bench/baseline_skip_locked.sql, bench/skq_*.sql)
#   PgQ          Debian's postgresql-15-pgq3, batch throughput (bench/pgq_*.sql)
#   sbqueue      this extension (bench/sbq_*.sql)
# Environment: BENCH_BATCH (batch size, default 100), BENCH_DEEP_MINUTES,
# BENCH_DEEP_BASELINE=1 (run the deep-queue phase for SKIP LOCKED too),
# BENCH_WAKEUPS (wake-ups to measure; 0 skips bench/wakeup.sh),
# BENCH_DEADLETTERS=0 (skips bench/deadletters.sh in --full), BENCH_NO_PRELOAD=0
# (skips bench/no_preload.sh in --full), BENCH_STATS=0 (skips bench/stats.sh in
# --full), BENCH_STATS_DEPTH (its deeper queues' messages, default 100000),
# BENCH_ONLY (a regular expression: only the cells whose "label, C clients" it
# matches, e.g. 'full cycle 100 / tx, [48] clients', and no deep phase),
# BENCH_ROUNDS (rounds of cells instead of 3, or 1 in --quick). BENCH_ONLY also
# turns the other benchmarks off unless their variables say otherwise, and
# cannot be written (--write).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

mode=quick
write=
for a in "$@"; do
    case "$a" in
    --quick) mode=quick ;;
    --full) mode=full ;;
    --write) write=--write ;;
    *) echo "usage: bench/run.sh [--quick|--full] [--write]" >&2; exit 2 ;;
    esac
done
command="bench/run.sh $*"
[ -n "${BENCH_DEEP_MINUTES:-}" ] && command="BENCH_DEEP_MINUTES=$BENCH_DEEP_MINUTES $command"
[ -n "${BENCH_BATCH:-}" ] && command="BENCH_BATCH=$BENCH_BATCH $command"
[ -n "${BENCH_ROUNDS:-}" ] && command="BENCH_ROUNDS=$BENCH_ROUNDS $command"
if [ -n "${BENCH_ONLY:-}" ]; then
    [ -z "$write" ] || { echo "run: BENCH_ONLY runs part of the report: it is not written (no --write)" >&2; exit 2; }
    : "${BENCH_WAKEUPS:=0}" "${BENCH_DEADLETTERS:=0}" "${BENCH_NO_PRELOAD:=0}" "${BENCH_STATS:=0}"
    command="BENCH_ONLY='$BENCH_ONLY' $command"
fi

PG_MAJOR=${PG_MAJOR:-15}
if ! dpkg-query -W -f='${Status}' "postgresql-$PG_MAJOR-pgq3" 2>/dev/null | grep -q "install ok installed"; then
    echo "run: installing postgresql-$PG_MAJOR-pgq3" >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "postgresql-$PG_MAJOR-pgq3" >/dev/null
fi
scripts/setup.sh >/dev/null
PG_CONFIG=${PG_CONFIG:-/usr/lib/postgresql/$PG_MAJOR/bin/pg_config}
export PGBIN=${PGBIN:-$("$PG_CONFIG" --bindir)}
export PATH="$PGBIN:$PATH"

work=$(mktemp -d /tmp/sbqueue-bench-run.XXXXXX)
chmod 755 "$work"
cleanup() {
    scripts/pgserver.sh stop "$work/pg" >/dev/null 2>&1 || true
    rm -rf "$work"
}
trap cleanup EXIT

# what else the machine is doing, for the report
background="load average $(cut -d' ' -f1-3 /proc/loadavg) at the start; busiest other processes: $(
    ps -eo pcpu=,comm= --sort=-pcpu | awk '$1 > 5 {printf "%s%s (%s %% CPU)", sep, $2, $1; sep=", "}' | head -c 300)"
[ -n "${background##*busiest other processes: }" ] || background="${background%; busiest*}; no other process above 5 % CPU"

# the wake-up latency first: bench/wakeup.sh starts and stops its own server
wakeups=${BENCH_WAKEUPS:-$([ "$mode" = full ] && echo 1000 || echo 100)}
if [ "$wakeups" -gt 0 ]; then
    echo "run: bench/wakeup.sh $wakeups" >&2
    bench/wakeup.sh "$wakeups" >"$work/wakeup.txt" 2>&1 || echo "(bench/wakeup.sh failed)" >>"$work/wakeup.txt"
    sed -i "1i bench/wakeup.sh $wakeups" "$work/wakeup.txt"
fi

# the dead letters (full mode): bench/deadletters.sh starts and stops its own servers
if [ "$mode" = full ] && [ "${BENCH_DEADLETTERS:-1}" != 0 ]; then
    echo "run: bench/deadletters.sh 10 3" >&2
    bench/deadletters.sh 10 3 >"$work/deadletters.txt" ||
        echo "(bench/deadletters.sh failed)" >>"$work/deadletters.txt"
fi

# the cycle without the preload (full mode): bench/no_preload.sh starts and stops its own server
if [ "$mode" = full ] && [ "${BENCH_NO_PRELOAD:-1}" != 0 ]; then
    echo "run: bench/no_preload.sh HEAD 10 3" >&2
    bench/no_preload.sh HEAD 10 3 >"$work/no_preload.txt" ||
        echo "(bench/no_preload.sh failed)" >>"$work/no_preload.txt"
fi

# what reading the numbers costs by depth (full mode), 100 queues of 1,000 and of
# BENCH_STATS_DEPTH messages: bench/stats.sh starts and stops its own server
if [ "$mode" = full ] && [ "${BENCH_STATS:-1}" != 0 ]; then
    stats_depths="1000 ${BENCH_STATS_DEPTH:-100000}"
    echo "run: bench/stats.sh 100 \"$stats_depths\" 3" >&2
    bench/stats.sh 100 "$stats_depths" 3 >"$work/stats.txt" ||
        echo "(bench/stats.sh failed)" >>"$work/stats.txt"
fi

port=$(scripts/pgserver.sh start "$work/pg" --preload)
export PGHOST="$work/pg" PGPORT="$port" PGUSER=postgres PGDATABASE=postgres
# room for a 1,000,000-deep queue in memory, and checkpoints by time rather than by WAL volume
psql -X -q -v ON_ERROR_STOP=1 -c "ALTER SYSTEM SET shared_buffers = '1GB'" \
    -c "ALTER SYSTEM SET max_wal_size = '8GB'" -c "ALTER SYSTEM SET synchronous_commit = on"
scripts/pgserver.sh stop "$work/pg"
port=$(scripts/pgserver.sh start "$work/pg" "$port" --preload)
psql -X -q -v ON_ERROR_STOP=1 -c "CREATE EXTENSION sbqueue" \
    -c "SELECT sbq_create_queue('bench')" >/dev/null
psql -X -q -v ON_ERROR_STOP=1 -f bench/baseline_skip_locked.sql >/dev/null
psql -X -q -v ON_ERROR_STOP=1 -f bench/pgq_setup.sql >/dev/null

echo "run: $mode mode, server on port $port" >&2
/usr/bin/python3 bench/run.py --mode "$mode" $write --command "$command" \
    --wakeup "$work/wakeup.txt" --deadletters "$work/deadletters.txt" \
    --no-preload "$work/no_preload.txt" --stats "$work/stats.txt" --background "$background"
