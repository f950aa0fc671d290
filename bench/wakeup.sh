#!/usr/bin/env bash
# bench/wakeup.sh: wake-up latency of blocking receives (see bench/wakeup.c).
#
#   bench/wakeup.sh [iterations] [port]      default: 1000 wake-ups, a free port
#
# Measures the sbqueue installed for $PG_CONFIG: it compiles its client,
# bench/wakeup.c, into a scratch directory, but builds and installs nothing of
# sbqueue, so run `make install` (or scripts/setup.sh) first. Starts a
# throwaway server with sbqueue preloaded (scripts/pgserver.sh: fsync on,
# synchronous_commit on, the maintenance worker on), runs the benchmark in a
# fresh database and stops the server. The receiver's
# sbqueue.receive_poll_interval is 60s, so only a wake-up ends its sleep.
# BENCH_NO_PRELOAD=1 runs the same against a server without the preload, where
# receives poll every 100ms (the default): use a few hundred iterations, each
# takes about 50 ms.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

iterations=${1:-1000}
port=${2:-}
PG_CONFIG=${PG_CONFIG:-/usr/lib/postgresql/${PG_MAJOR:-15}/bin/pg_config}
export PGBIN=${PGBIN:-$("$PG_CONFIG" --bindir)}

work=$(mktemp -d /tmp/sbqueue-bench-wakeup.XXXXXX)
chmod 755 "$work"
cleanup() {
    "$root/scripts/pgserver.sh" stop "$work/pg" >/dev/null 2>&1 || true
    rm -rf "$work"
}
trap cleanup EXIT

cc -O2 -Wall -o "$work/wakeup" bench/wakeup.c \
    -I"$("$PG_CONFIG" --includedir)" -L"$("$PG_CONFIG" --libdir)" -lpq

preload=--preload
poll=60s
if [ "${BENCH_NO_PRELOAD:-0}" = 1 ]; then preload=; poll=100ms; fi
port=$("$root/scripts/pgserver.sh" start "$work/pg" $port $preload)
export PGHOST="$work/pg" PGPORT="$port" PGUSER=postgres
"$PGBIN/psql" -X -q -v ON_ERROR_STOP=1 -d postgres -c "CREATE DATABASE sbq_bench_wakeup"
"$PGBIN/psql" -X -q -v ON_ERROR_STOP=1 -d sbq_bench_wakeup -c "CREATE EXTENSION sbqueue"

echo "machine: $(nproc) CPUs, $(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -1)"
echo "server: $("$PGBIN/psql" -X -At -d postgres -c 'SHOW server_version'), fsync=$("$PGBIN/psql" -X -At -d postgres -c 'SHOW fsync'), synchronous_commit=$("$PGBIN/psql" -X -At -d postgres -c 'SHOW synchronous_commit')"
"$work/wakeup" -n "$iterations" -p "$poll" "dbname=sbq_bench_wakeup"
