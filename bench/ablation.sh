#!/usr/bin/env bash
# bench/ablation.sh: what keeping locks in shared memory buys, side by side.
#
#   bench/ablation.sh [SECONDS] [ROUNDS]      defaults: 10 s cells, 3 rounds
#
# One throwaway server (scripts/pgserver.sh --preload: fsync on,
# synchronous_commit on, shared_buffers 1GB, the maintenance worker off so it
# does not run between cells). Each round runs, one after the other, the full
# cycle of one message per transaction (send, receive, complete: three
# transactions) at 4 clients for:
#   SKIP LOCKED          the plain-SQL baseline (bench/skq_cycle.sql)
#   sbqueue, leases      sbqueue.memory_locks = on (the default)
#   sbqueue, row locks   sbqueue.memory_locks = off: locks stored in the rows
# and the same receive + complete of one message from a filled queue. Prints
# the median messages/second of each and the ratios, as a Markdown table.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-10}
rounds=${2:-3}

scripts/setup.sh >/dev/null
PG_CONFIG=${PG_CONFIG:-/usr/lib/postgresql/${PG_MAJOR:-15}/bin/pg_config}
PGBIN=$("$PG_CONFIG" --bindir)
work=$(mktemp -d /tmp/sbqueue-ablation.XXXXXX)
chmod 755 "$work"
trap 'scripts/pgserver.sh stop "$work/pg" >/dev/null 2>&1 || true; rm -rf "$work"' EXIT

port=$(scripts/pgserver.sh start "$work/pg" --preload)
export PGHOST="$work/pg" PGPORT="$port" PGUSER=postgres PGDATABASE=postgres
psql -X -q -v ON_ERROR_STOP=1 -c "ALTER SYSTEM SET shared_buffers = '1GB'" \
    -c "ALTER SYSTEM SET max_wal_size = '8GB'" \
    -c "ALTER SYSTEM SET sbqueue.enable_maintenance_worker = off"
scripts/pgserver.sh stop "$work/pg"
scripts/pgserver.sh start "$work/pg" "$port" --preload >/dev/null
psql -X -q -v ON_ERROR_STOP=1 -c "CREATE EXTENSION sbqueue" -c "SELECT sbq_create_queue('bench')" >/dev/null
psql -X -q -v ON_ERROR_STOP=1 -f bench/baseline_skip_locked.sql >/dev/null

empty() {
    psql -X -q -c "TRUNCATE skq_messages" -c "SELECT sbq_purge_queue('bench')" \
        -c "VACUUM ANALYZE skq_messages" -c "VACUUM ANALYZE sbq.messages" >/dev/null
}
fill() {   # $1: messages to queue for receive + complete cells
    psql -X -q -c "INSERT INTO skq_messages (body) SELECT 'bench message body' FROM generate_series(1, $1)" \
        -c "DO \$\$ BEGIN FOR i IN 0 .. ($1 - 1) / 5000 LOOP
                PERFORM sbq_send_batch('bench', array_fill('bench message body'::text,
                    ARRAY[least(5000, $1 - i * 5000)])); END LOOP; END \$\$" >/dev/null
}
cell() {   # $1 script, $2 PGOPTIONS: prints messages/second
    PGOPTIONS="$2" "$PGBIN/pgbench" -n -M prepared -c 4 -j 2 -T "$secs" \
        -D tok=00000000-0000-0000-0000-000000000000 -f "bench/$1.sql" 2>&1 |
        sed -n 's/^tps = \([0-9.]*\) .*/\1/p'
}

declare -A got
names=("SKIP LOCKED|skq" "sbqueue, leases|sbq|-c sbqueue.memory_locks=on" "sbqueue, row locks|sbq|-c sbqueue.memory_locks=off")
for r in $(seq "$rounds"); do
    for n in "${names[@]}"; do
        IFS='|' read -r label prefix opts <<<"$n"
        empty
        got["$label|cycle"]+="$(cell "${prefix}_cycle" "${opts:-}") "
        empty
        fill 200000
        got["$label|consume"]+="$(cell "${prefix}_consume" "${opts:-}") "
    done
    echo "ablation: round $r of $rounds done" >&2
done

median() { tr ' ' '\n' | sed '/^$/d' | sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
base_cycle=$(echo "${got[SKIP LOCKED|cycle]}" | median)
base_consume=$(echo "${got[SKIP LOCKED|consume]}" | median)
echo
echo "bench/ablation.sh $secs $rounds: 4 clients, medians of $rounds interleaved ${secs} s runs, messages/second"
echo
echo "| contender | full cycle 1 / tx | / SKIP LOCKED | receive + complete 1 / tx | / SKIP LOCKED |"
echo "|---|---|---|---|---|"
for n in "${names[@]}"; do
    IFS='|' read -r label prefix opts <<<"$n"
    c=$(echo "${got[$label|cycle]}" | median)
    d=$(echo "${got[$label|consume]}" | median)
    printf '| %s | %.0f | %.2fx | %.0f | %.2fx |\n' "$label" "$c" "$(echo "$c / $base_cycle" | bc -l)" \
        "$d" "$(echo "$d / $base_consume" | bc -l)"
done
