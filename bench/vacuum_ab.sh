#!/usr/bin/env bash
# bench/vacuum_ab.sh: what the maintenance worker's vacuum of sbq.messages
# costs and what it keeps, side by side on one server.
#
#   bench/vacuum_ab.sh [SECONDS] [ROUNDS] [DEPTH]   defaults: 30 s, 2 rounds, 1,000,000
#
# One throwaway server (scripts/pgserver.sh --preload: fsync on,
# synchronous_commit on, shared_buffers 1GB, the maintenance worker on, as
# in production). The queue is filled to DEPTH messages, then cycled (send,
# receive, complete: bench/sbq_cycle.sql, 4 clients) in cells of SECONDS with
# sbqueue.vacuum_threshold = 20000 (the default: the worker vacuums) and 0
# (autovacuum only), in the order on, off, off, on each round so that a drift
# over the run falls on both alike. Prints each cell's messages/second, the
# heap and index sizes after it and the dead rows, and the ratio of the
# medians, as a Markdown table.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-30}
rounds=${2:-2}
depth=${3:-1000000}

scripts/setup.sh >/dev/null
PG_CONFIG=${PG_CONFIG:-/usr/lib/postgresql/${PG_MAJOR:-15}/bin/pg_config}
PGBIN=$("$PG_CONFIG" --bindir)
export PATH="$PGBIN:$PATH"
work=$(mktemp -d /tmp/sbqueue-vacuum-ab.XXXXXX)
chmod 755 "$work"
trap 'scripts/pgserver.sh stop "$work/pg" >/dev/null 2>&1 || true; rm -rf "$work"' EXIT

port=$(scripts/pgserver.sh start "$work/pg" --preload)
export PGHOST="$work/pg" PGPORT="$port" PGUSER=postgres PGDATABASE=postgres
psql -X -q -v ON_ERROR_STOP=1 -c "ALTER SYSTEM SET shared_buffers = '1GB'" \
    -c "ALTER SYSTEM SET max_wal_size = '8GB'" >/dev/null
scripts/pgserver.sh stop "$work/pg"
port=$(scripts/pgserver.sh start "$work/pg" "$port" --preload)
psql -X -q -v ON_ERROR_STOP=1 -c "CREATE EXTENSION sbqueue" -c "SELECT sbq_create_queue('bench')" >/dev/null

body='bench message body: 0123456789 abcdefghijklmnopqrstuvwxyz ABCDEFGHIJKLMNOPQRSTUVWXYZ 0123456789 end'
left=$depth
while [ "$left" -gt 0 ]; do
    k=$((left < 5000 ? left : 5000))
    psql -X -q -v ON_ERROR_STOP=1 -c "SELECT count(*) FROM sbq_send_batch('bench', array_fill('$body'::text, ARRAY[$k]))" >/dev/null
    left=$((left - k))
done
psql -X -q -v ON_ERROR_STOP=1 -c "VACUUM ANALYZE sbq.messages"

echo "bench/vacuum_ab.sh $secs $rounds $depth: a $depth-deep queue, full cycle 1 / tx, 4 clients, ${secs} s a cell"
echo
echo "| round | sbqueue.vacuum_threshold | msg/s | heap MB after | index MB after | dead rows after | worker vacuums so far |"
echo "|---|---|---|---|---|---|---|"
on=()
off=()
for r in $(seq 1 "$rounds"); do
    for thr in 20000 0 0 20000; do
        psql -X -q -c "ALTER SYSTEM SET sbqueue.vacuum_threshold = $thr" -c "SELECT pg_reload_conf()" >/dev/null
        tps=$(pgbench -n -M prepared -c 4 -j 4 -T "$secs" -f bench/sbq_cycle.sql 2>&1 |
            sed -n 's/^tps = \([0-9.]*\).*/\1/p')
        psql -X -q -c "SELECT pg_stat_force_next_flush()" >/dev/null
        row=$(psql -X -At -F '|' -c "SELECT round(pg_relation_size('sbq.messages') / 1048576.0, 1),
                round(pg_indexes_size('sbq.messages') / 1048576.0, 1), n_dead_tup, vacuum_count
              FROM pg_stat_user_tables WHERE relid = 'sbq.messages'::regclass")
        printf '| %s | %s | %.0f | %s |\n' "$r" "$thr" "$tps" "$(echo "$row" | sed 's/|/ | /g')"
        if [ "$thr" = 0 ]; then off+=("$tps"); else on+=("$tps"); fi
    done
done
median() { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2}'; }
m_on=$(median "${on[@]}")
m_off=$(median "${off[@]}")
echo
awk -v a="$m_on" -v b="$m_off" \
    'BEGIN { printf "median: worker vacuum on %.0f msg/s, off %.0f msg/s: on / off %.2fx\n", a, b, a / b }'
