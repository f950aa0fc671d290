#!/usr/bin/env bash
# bench/deadletters.sh: the full cycle on a queue that holds 1,000,000 dead letters,
# side by side with the same cycle on queues that hold none.
#
#   bench/deadletters.sh [SECONDS] [ROUNDS]     defaults: 20 s cells, 3 rounds
#
# Measures the sbqueue installed for $PG_CONFIG (it builds nothing: run
# `make install` first, or point PG_CONFIG at a copy of PostgreSQL's
# installation that holds another build). Two throwaway servers
# (scripts/pgserver.sh --preload: fsync on, synchronous_commit on,
# shared_buffers 1GB, max_wal_size 8GB, the maintenance worker running, as
# bench/run.sh has them), each with the queues 'clean' and 'dead':
#   dead server  'dead' holds DL_COUNT (1,000,000) dead letters in its
#                dead-letter sub-queue: DL_REAL (3,000) sent, received and
#                dead-lettered through the API (sbq_deadletter), the rest
#                inserted directly (bench/deadletters_fill.sql), then VACUUM
#                ANALYZE and a checkpoint; 'clean' holds none
#   none server  no dead letters at all
# Wherever the installed version keeps dead letters: sbq.dead_letters from 0.4
# on; before, sbq.messages with subqueue = 1, the table and the receive index
# every queue's cycle uses, so there the 'clean' queue shares their cost and
# the none server is the reference without it.
#
# Contenders, each the full cycle of 4 pgbench clients:
#   none   queue 'clean' on the none server
#   clean  queue 'clean' on the dead server
#   dead   queue 'dead' on the dead server
# Workloads: the cycle of 1 (bench/deadletters_cycle.sql, bench/sbq_cycle.sql
# on a named queue) and of a batch (bench/deadletters_cycle_batch.sql). Before
# every cell the queue's active messages are purged, sbq.messages vacuumed and
# analyzed, and a checkpoint taken; only the server measured is busy. The
# contenders take turns cell by cell (none clean dead, then dead clean none),
# ROUNDS times. A cell counts the messages completed (the queue's active rows
# before + sent - after) per second of pgbench time. Prints the median of each,
# dead/clean and dead/none, as a Markdown table, and what else used the CPUs
# (top, over a second) at the start, at the end and just before each cell.
#
# Environment: BENCH_BATCH (batch size, default 100), DL_COUNT, DL_REAL,
# DL_PORT (the first of two ports to listen on; default: the first free ones).
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-20}
rounds=${2:-3}
batch=${BENCH_BATCH:-100}
count=${DL_COUNT:-1000000}
real=${DL_REAL:-3000}
[ "$real" -le "$count" ] || real=$count

PG_CONFIG=${PG_CONFIG:-/usr/lib/postgresql/${PG_MAJOR:-15}/bin/pg_config}
export PGBIN=${PGBIN:-$("$PG_CONFIG" --bindir)}
export PATH="$PGBIN:$PATH"
export PGUSER=postgres PGDATABASE=postgres
unset PGOPTIONS

work=$(mktemp -d /tmp/sbqueue-deadletters.XXXXXX)
chmod 755 "$work"
cleanup() {
    for s in dead none; do scripts/pgserver.sh stop "$work/$s" >/dev/null 2>&1 || true; done
    rm -rf "$work"
}
trap cleanup EXIT
log() { echo "deadletters: $(date +%H:%M:%S) $*" >&2; }

load_at_start=$(cut -d' ' -f1-3 /proc/loadavg)
# what else the machine is doing: processes above 5 % CPU over one second
others() {
    top -b -n 2 -d 1 -w 200 | awk '/^top -/ { k++ }
        k == 2 && $1 ~ /^[0-9]+$/ && $9 + 0 > 5 { printf "%s%s (%s %% CPU)", sep, $12, $9; sep = ", " }' |
        head -c 300
}
busy=$(others)
started=$(date +%s)

declare -A port
for s in dead none; do
    p=
    if [ -n "${DL_PORT:-}" ]; then
        p=$DL_PORT
        [ "$s" = none ] && p=$((DL_PORT + 1))
    fi
    port[$s]=$(scripts/pgserver.sh start "$work/$s" $p --preload)
    PGHOST="$work/$s" PGPORT=${port[$s]} psql -X -q -v ON_ERROR_STOP=1 \
        -c "ALTER SYSTEM SET shared_buffers = '1GB'" -c "ALTER SYSTEM SET max_wal_size = '8GB'" \
        -c "ALTER SYSTEM SET synchronous_commit = on"
    scripts/pgserver.sh stop "$work/$s"
    scripts/pgserver.sh start "$work/$s" "${port[$s]}" --preload >/dev/null
    PGHOST="$work/$s" PGPORT=${port[$s]} psql -X -q -v ON_ERROR_STOP=1 -c "CREATE EXTENSION sbqueue" \
        -c "SELECT queue FROM sbq_create_queue('clean')" -c "SELECT queue FROM sbq_create_queue('dead')" >/dev/null
done
on() { export PGHOST="$work/$1" PGPORT=${port[$1]}; }
sql() { psql -X -At -q -v ON_ERROR_STOP=1 "$@"; }

# the dead letters, on the dead server
on dead
version=$(sql -c "SELECT extversion FROM pg_extension WHERE extname = 'sbqueue'")
if [ "$(sql -c "SELECT to_regclass('sbq.dead_letters') IS NOT NULL")" = t ]; then
    dl_where="sbq.dead_letters"
    dl_count="SELECT count(*) FROM sbq.dead_letters WHERE queue_id = (SELECT queue_id FROM sbq.queues WHERE name = 'dead')"
else
    dl_where="sbq.messages, subqueue = 1"
    dl_count="SELECT count(*) FROM sbq.messages WHERE subqueue = 1 AND queue_id = (SELECT queue_id FROM sbq.queues WHERE name = 'dead')"
fi
log "sbqueue $version (dead letters in $dl_where); $real dead letters through sbq_deadletter"
body='bench message body: 0123456789 abcdefghijklmnopqrstuvwxyz ABCDEFGHIJKLMNOPQRSTUVWXYZ 0123456789 end'
left=$real
while [ "$left" -gt 0 ]; do
    k=$((left < 500 ? left : 500))
    sql -c "SELECT count(*) FROM sbq_send_batch('dead', array_fill('$body'::text, ARRAY[$k]))" >/dev/null
    got=$(sql -c "SELECT count(sbq_deadletter('dead', lock_token, 'bench', 'dead-lettered by bench/deadletters.sh'))
                    FROM sbq_receive('dead', $k)")
    [ "$got" = "$k" ] || { echo "deadletters: dead-lettered $got of $k" >&2; exit 1; }
    left=$((left - k))
done
log "$((count - real)) dead letters inserted directly"
sql -v queue=dead -v count=$((count - real)) -f bench/deadletters_fill.sql
sql -c "VACUUM ANALYZE" -c "CHECKPOINT"
have=$(sql -c "$dl_count")
peek=$(sql -c "SELECT count(*) FROM sbq_peek('dead/\$deadletterqueue', 10)")
[ "$have" = "$count" ] && [ "$peek" = 10 ] ||
    { echo "deadletters: $have dead letters, sbq_peek saw $peek of 10" >&2; exit 1; }
sizes=$(sql -F ' ' -c "SELECT c.oid::regclass, round(pg_relation_size(c.oid) / 1048576.0, 1),
                              round(pg_indexes_size(c.oid) / 1048576.0, 1)
                         FROM pg_class c WHERE c.oid IN ('sbq.messages'::regclass, to_regclass('sbq.dead_letters'))
                        ORDER BY 1" |
    awk '{ printf "%s%s %s MB heap + %s MB indexes", sep, $1, $2, $3; sep = "; " }')
log "$sizes"

# one cell: server $1, queue $2, script $3, messages per transaction $4; prints msg/s and tps
cell() {
    local s=$1 q=$2 script=$3 n=$4 before after out txns tps
    on "$s"
    local active="SELECT count(*) FROM sbq.messages WHERE subqueue = 0
                    AND queue_id = (SELECT queue_id FROM sbq.queues WHERE name = '$q')"
    sql -c "SELECT sbq_purge_queue('$q')" -c "VACUUM ANALYZE sbq.messages" \
        -c "VACUUM ANALYZE sbq.queue_counters" -c "CHECKPOINT" >/dev/null
    before=$(sql -c "$active")
    o=$(others)
    [ -z "$o" ] || echo "$o" >"$work/others.cell"
    out=$(pgbench -n -M prepared -c 4 -j 2 -T "$secs" -D q="$q" -D n="$n" \
        -D tok=00000000-0000-0000-0000-000000000000 -f "bench/$script.sql" 2>&1) || true
    after=$(sql -c "$active")
    txns=$(sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p' <<<"$out")
    tps=$(sed -n 's/^tps = \([0-9.]*\) (without initial connection time)/\1/p' <<<"$out")
    if [ -z "$txns" ] || [ -z "$tps" ] || grep -q 'number of failed transactions: [1-9]' <<<"$out"; then
        echo "deadletters: pgbench $script on $s/$q failed:" >&2
        tail -15 <<<"$out" >&2
        exit 1
    fi
    awk -v b="$before" -v a="$after" -v t="$txns" -v n="$n" -v tps="$tps" \
        'BEGIN { printf "%.0f %.0f", (b + t * n - a) / (t / tps), tps }'
}

# name|script|messages per transaction
workloads=(
    "full cycle 1 / tx|deadletters_cycle|1"
    "full cycle $batch / tx|deadletters_cycle_batch|$batch"
)
declare -A rate tpss
beside=()
for r in $(seq "$rounds"); do
    for w in "${workloads[@]}"; do
        IFS='|' read -r name script n <<<"$w"
        order=(none clean dead)
        [ $((r % 2)) -eq 0 ] && order=(dead clean none)
        for c in "${order[@]}"; do
            case $c in none) s=none q=clean ;; clean) s=dead q=clean ;; dead) s=dead q=dead ;; esac
            res=$(cell "$s" "$q" "$script" "$n")
            read -r m t <<<"$res"
            rate["$name|$c"]+="$m "
            tpss["$name|$c"]+="$t "
            log "round $r, $name, $c: $m msg/s ($t tps)"
            if [ -f "$work/others.cell" ]; then
                log "  began beside: $(cat "$work/others.cell")"
                beside+=("round $r, $name, $c: $(cat "$work/others.cell")")
                rm -f "$work/others.cell"
            fi
        done
    done
done
on dead
have=$(sql -c "$dl_count")
[ "$have" = "$count" ] || { echo "deadletters: $have dead letters left of $count" >&2; exit 1; }
busy_at_end=$(others)
minutes=$(awk -v s="$(( $(date +%s) - started ))" 'BEGIN { printf "%.1f", s / 60 }')

median() { tr ' ' '\n' | grep . | sort -n | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
# awk: whole numbers with thousands separators (the locale may have none)
commas='function commas(x,   s) { s = sprintf("%.0f", x); while (s ~ /[0-9][0-9][0-9][0-9]/) sub(/[0-9][0-9][0-9]($|,)/, ",&", s); return s }'
spread() { tr ' ' '\n' | grep . | sort -n | awk "$commas"' { v[NR] = $1 } END { printf "%s–%s", commas(v[1]), commas(v[NR]) }'; }
n_count=$(awk "$commas"' BEGIN { print commas('"$count"') }')
n_real=$(awk "$commas"' BEGIN { print commas('"$real"') }')
echo "bench/deadletters.sh $secs $rounds: sbqueue $version, dead letters in $dl_where ($minutes min)."
echo "Messages completed per second, the median of $rounds cells of $secs s each, 4 clients"
echo "(pgbench -n -M prepared -c 4 -j 2), fsync and synchronous_commit on, shared_buffers 1GB,"
echo "the maintenance worker running; $(nproc) CPUs, load average $load_at_start at the start."
echo "Above 5 % CPU over a second, at the start: ${busy:-nothing}; at the end: ${busy_at_end:-nothing};"
if [ ${#beside[@]} -eq 0 ]; then
    echo "in the second before each cell: nothing."
else
    echo "in the second before a cell: $(printf '%s; ' "${beside[@]}" | sed 's/; $//')."
fi
echo "'dead' holds $n_count dead letters ($n_real through sbq_deadletter),"
echo "'clean' on the same server none, and the none server none at all. Dead server after"
echo "the fill: $sizes."
echo
echo "| workload | none | clean | dead | dead/clean | dead/none |"
echo "|---|---:|---:|---:|---:|---:|"
for w in "${workloads[@]}"; do
    IFS='|' read -r name script n <<<"$w"
    a=$(median <<<"${rate["$name|none"]}")
    b=$(median <<<"${rate["$name|clean"]}")
    d=$(median <<<"${rate["$name|dead"]}")
    awk -v name="$name" -v a="$a" -v b="$b" -v d="$d" "$commas"' BEGIN {
        printf "| %s | %s | %s | %s | %.2fx | %.2fx |\n", name, commas(a), commas(b), commas(d), (b > 0 ? d / b : 0), (a > 0 ? d / a : 0) }'
done
echo
echo "Spread of the cells (msg/s, min–max) and the median pgbench tps (script runs per second):"
echo
for w in "${workloads[@]}"; do
    IFS='|' read -r name script n <<<"$w"
    line="- $name:"
    for c in none clean dead; do
        line+=" $c $(spread <<<"${rate["$name|$c"]}") ($(median <<<"${tpss["$name|$c"]}") tps);"
    done
    echo "${line%;}"
done
