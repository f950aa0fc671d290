#!/usr/bin/env bash
# bench/console.sh: what the web console's page costs with many queues, this
# tree's console against an earlier commit's, side by side.
#
#   bench/console.sh REV [QUEUES] [ROUNDS]     defaults: 5,000 queues, 4 rounds
#
# Measures the sbqueue installed for $PG_CONFIG (it builds no library: the
# console's SQL is the same for both). One throwaway server
# (scripts/pgserver.sh --preload) with a database of QUEUES empty queues; two
# consoles on it, read-only, sampling every 5 s: this tree's console/ and REV's
# (its server.js and public/, with this tree's node_modules). Headless Chromium
# (bench/console_page.js, playwright-core) opens each console's page in turn,
# A B B A for ROUNDS rounds, and measures:
#   first view   ms from the page's load to the last queue's row in the table
#   refresh      ms the page's thread spends in one refresh of the list
#                (renderQueues; the median of the refreshes in 12 s)
#   busy         ms of long tasks (over 50 ms) in those 12 s
#   peek         ms from a click on a row's Peek to the peek shown
# Prints the median of each, and new/old, as a Markdown table.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
rev=${1:?usage: bench/console.sh REV [QUEUES] [ROUNDS]}
queues=${2:-5000}
rounds=${3:-4}

PG_CONFIG=${PG_CONFIG:-/usr/lib/postgresql/${PG_MAJOR:-15}/bin/pg_config}
export PGBIN=${PGBIN:-$("$PG_CONFIG" --bindir)}
[ -x /usr/bin/chromium ] || { echo "bench/console.sh: needs Debian's chromium (console/test/run.sh installs it)" >&2; exit 1; }
[ -d console/node_modules/playwright-core ] || (cd console && npm install --no-audit --no-fund --silent)

work=$(mktemp -d /tmp/sbqueue-console.XXXXXX)
chmod 755 "$work"
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    scripts/pgserver.sh stop "$work/srv" >/dev/null 2>&1 || true
    rm -rf "$work"
}
trap cleanup EXIT

mkdir -p "$work/old"
git -C "$root" archive "$rev" console/server.js console/public | tar -x -C "$work/old"
ln -s "$root/console/node_modules" "$work/old/console/node_modules"

port=$(scripts/pgserver.sh start "$work/srv" --preload)
export PGHOST=127.0.0.1 PGPORT=$port PGUSER=postgres PGDATABASE=sbq_bench_console
"$PGBIN/psql" -qX -d postgres -c "CREATE DATABASE sbq_bench_console"
"$PGBIN/psql" -qX -v ON_ERROR_STOP=1 -c "CREATE EXTENSION sbqueue" \
    -c "SELECT count(sbq_create_queue('q' || lpad(i::text, 5, '0'))) FROM generate_series(1, $queues) i" >/dev/null

start_console() {   # $1: the console's directory; prints its URL
    node "$1/server.js" --port 0 --sample-seconds 5 >"$work/$2.out" 2>"$work/$2.err" &
    pids+=($!)
    for _ in $(seq 1 100); do
        grep -o 'http://[^ ]*' "$work/$2.out" 2>/dev/null && return 0
        sleep 0.1
    done
    echo "bench/console.sh: the $2 console did not start: $(cat "$work/$2.err")" >&2
    return 1
}
old_url=$(start_console "$work/old/console" old)
new_url=$(start_console "$root/console" new)
last=q$(printf '%05d' "$queues")

echo "console with $queues queues: $(git -C "$root" log -1 --format='%h' "$rev") (old) against $(git -C "$root" log -1 --format='%h' HEAD) (new)"
node bench/console_page.js "$old_url" "$new_url" "$last" "$rounds"
