#!/usr/bin/env bash
# bench/ab.sh: this tree's sbqueue against an earlier commit's, side by side.
#
#   bench/ab.sh REV [SECONDS] [ROUNDS]     defaults: 10 s cells, 3 rounds
#
# Builds REV (a git revision of this repository) into a private copy of
# PostgreSQL's installation, and this tree into the system's (scripts/setup.sh).
# Each contender gets a throwaway server of its own (scripts/pgserver.sh
# --preload: fsync on, synchronous_commit on, shared_buffers 1GB, the
# maintenance worker off so it does not run between cells); only one runs at a
# time, and the contenders take turns cell by cell, in the order A B B A, so a
# drift of the machine does not favour one. The cells are bench/run.sh's
# sbqueue workloads at 4 clients (AB_CLIENTS): send 1 and a batch; the server's own
# time for a send, plain and with a session id (a DO block of 20,000 after 2,000, no
# client and no commit: its rate is 20,000 over the block's time); receive + complete of 1
# and a batch from a filled queue, and the full cycle of 1 and a batch; and
# the cycle of 1 with sbqueue.memory_locks off (locks in the rows), and beside
# 5,000 messages at the head that another consumer holds under locks.
# Prints the median messages/second of each and new/old, as a Markdown table.
# AB_ONLY (an extended regular expression) keeps the workloads whose names match;
# AB_NO_PRELOAD=1 starts both servers without shared_preload_libraries (locks
# and counters in the rows); AB_CLIENTS sets the clients of every cell (4);
# AB_WORKER=1 leaves the maintenance worker on, as bench/run.sh and a server in
# use have it (its passes then run during the cells, at its default interval);
# AB_STATEMENT (a LIKE pattern) preloads pg_stat_statements with track = all and
# adds a table of what the statements whose text matches cost in each cell
# (sbqueue's own statements run inside its functions: track = all shows them).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
rev=${1:?usage: bench/ab.sh REV [SECONDS] [ROUNDS]}
secs=${2:-10}
rounds=${3:-3}
batch=${BENCH_BATCH:-100}
clients=${AB_CLIENTS:-4}

scripts/setup.sh >/dev/null
PG_CONFIG=${PG_CONFIG:-/usr/lib/postgresql/${PG_MAJOR:-15}/bin/pg_config}
new_bin=$("$PG_CONFIG" --bindir)
work=$(mktemp -d /tmp/sbqueue-ab.XXXXXX)
chmod 755 "$work"
cleanup() {
    for c in old new; do scripts/pgserver.sh stop "$work/$c" >/dev/null 2>&1 || true; done
    git -C "$root" worktree remove --force "$work/src" >/dev/null 2>&1 || true
    rm -rf "$work"
}
trap cleanup EXIT

# the old build, in a copy of PostgreSQL's installation (its paths are
# relative to its binaries, so the copy finds its own library and share dirs)
git -C "$root" worktree add --detach "$work/src" "$rev" >/dev/null 2>&1
pkglib=$("$PG_CONFIG" --pkglibdir)
share=$("$PG_CONFIG" --sharedir)
prefix=$(cd "$new_bin/.." && pwd)
mkdir -p "$work/old-pg$(dirname "$prefix")" "$work/old-pg$(dirname "$share")"
cp -a "$prefix" "$work/old-pg$prefix"
cp -a "$share" "$work/old-pg$share"
[ "$pkglib" = "$prefix/lib" ] || { mkdir -p "$work/old-pg$pkglib"; cp -a "$pkglib/." "$work/old-pg$pkglib"; }
make -s -C "$work/src" PG_CONFIG="$PG_CONFIG" >/dev/null
make -s -C "$work/src" PG_CONFIG="$PG_CONFIG" install DESTDIR="$work/old-pg" >/dev/null
chmod -R a+rX "$work/old-pg"
old_bin=$work/old-pg$new_bin
describe_old=$(git -C "$root" log -1 --format='%h %s' "$rev")
describe_new=$(git -C "$root" log -1 --format='%h %s' HEAD)
[ -z "$(git -C "$root" status --porcelain -- src sql Makefile)" ] || describe_new="$describe_new (+ uncommitted changes)"

start() {   # $1: old or new
    local bin=$new_bin
    [ "$1" = old ] && bin=$old_bin
    if [ "${AB_NO_PRELOAD:-0}" = 1 ]; then
        PGBIN=$bin scripts/pgserver.sh start "$work/$1"
    else
        PGBIN=$bin scripts/pgserver.sh start "$work/$1" --preload
    fi
}
# no worker without the preload (and no setting of its to turn off)
worker_off="ALTER SYSTEM SET sbqueue.enable_maintenance_worker = off"
[ "${AB_NO_PRELOAD:-0}" = 1 ] && worker_off=
[ "${AB_WORKER:-0}" = 1 ] && worker_off=
for c in old new; do
    port=$(start $c)
    PGHOST="$work/$c" PGPORT=$port psql -X -q -U postgres -d postgres -v ON_ERROR_STOP=1 \
        -c "ALTER SYSTEM SET shared_buffers = '1GB'" -c "ALTER SYSTEM SET max_wal_size = '8GB'" \
        ${worker_off:+-c "$worker_off"} >/dev/null
    if [ -n "${AB_STATEMENT:-}" ]; then
        libs=pg_stat_statements
        [ "${AB_NO_PRELOAD:-0}" = 1 ] || libs="sbqueue, $libs"
        echo "pg_stat_statements.track = all" >>"$work/$c/data/postgresql.conf"
        PGHOST="$work/$c" PGPORT=$port psql -X -q -U postgres -d postgres -v ON_ERROR_STOP=1 \
            -c "ALTER SYSTEM SET shared_preload_libraries = $libs" >/dev/null
    fi
    scripts/pgserver.sh stop "$work/$c" >/dev/null
    port=$(start $c)
    PGHOST="$work/$c" PGPORT=$port psql -X -q -U postgres -d postgres -v ON_ERROR_STOP=1 \
        -c "CREATE EXTENSION sbqueue" -c "SELECT sbq_create_queue('bench')" \
        -c "SELECT sbq_create_queue('bench_s', requires_session => true)" >/dev/null
    [ -z "${AB_STATEMENT:-}" ] || PGHOST="$work/$c" PGPORT=$port psql -X -q -U postgres \
        -d postgres -v ON_ERROR_STOP=1 -c "CREATE EXTENSION pg_stat_statements" >/dev/null
    scripts/pgserver.sh stop "$work/$c" >/dev/null
done

# where a cell of contender $1, workload $2, keeps what AB_STATEMENT's statements cost
stmt_file() { echo "$work/stmt.$1.$(tr -c 'a-zA-Z0-9' _ <<<"$2")"; }

# one cell against contender $1: workload $2 (script, prefill), prints
# messages/second. A workload on a filled queue counts the messages it took
# (a transaction that found the queue empty takes none); the others count
# transactions times the messages each moves.
cell() {
    local c=$1 script=$2 prefill=$3 per=$4 opts=$5 held=${6:-0} stmt=$7 port tps before after
    port=$(start "$c")
    export PGHOST="$work/$c" PGPORT=$port PGUSER=postgres PGDATABASE=postgres
    psql -X -q -c "SELECT sbq_purge_queue('bench')" -c "VACUUM ANALYZE sbq.messages" >/dev/null
    if [ "$held" -gt 0 ]; then
        # messages at the head that another consumer holds under 5-minute locks
        psql -X -q -c "SELECT sbq_update_queue('bench', lock_duration => interval '5 min')" \
            -c "DO \$\$ BEGIN FOR i IN 0 .. ($held - 1) / 5000 LOOP
                PERFORM sbq_send_batch('bench', array_fill('held'::text,
                    ARRAY[least(5000, $held - i * 5000)]));
                PERFORM count(*) FROM sbq_receive('bench', least(5000, $held - i * 5000));
                END LOOP; END \$\$" \
            -c "SELECT sbq_update_queue('bench', lock_duration => interval '30 s')" \
            -c "VACUUM ANALYZE sbq.messages" >/dev/null
    fi
    if [ "$prefill" -gt 0 ]; then
        # in batches of 5,000, the most one call sends
        psql -X -q -c "DO \$\$ BEGIN FOR i IN 0 .. ($prefill - 1) / 5000 LOOP
                PERFORM sbq_send_batch('bench', array_fill('bench message body'::text,
                    ARRAY[least(5000, $prefill - i * 5000)])); END LOOP; END \$\$" \
            -c "VACUUM ANALYZE sbq.messages" >/dev/null
    fi
    if [ "${script#do:}" != "$script" ]; then
        # the server's own time: sends in a DO block, no client, no commit
        local body="'bench message body: 0123456789 abcdefghijklmnopqrstuvwxyz ABCDEFGHIJKLMNOPQRSTUVWXYZ 0123456789 end'::text" call ms
        call="sbq_send('bench', $body)"
        [ "$script" = do:session ] && call="sbq_send('bench_s', $body, session_id => 's' || i % 50)"
        ms=$(psql -X -q -c "SELECT sbq_purge_queue('bench_s')" \
            -c "DO \$\$ BEGIN FOR i IN 1 .. 2000 LOOP PERFORM $call; END LOOP; END \$\$" \
            -c '\timing on' \
            -c "DO \$\$ BEGIN FOR i IN 1 .. 20000 LOOP PERFORM $call; END LOOP; END \$\$" |
            sed -n 's/^Time: \([0-9.]*\) ms.*/\1/p' | tail -1)
        scripts/pgserver.sh stop "$work/$c" >/dev/null
        unset PGHOST PGPORT
        awk -v ms="${ms:-0}" 'BEGIN { printf "%.0f", (ms > 0 ? 20000 * 1000 / ms : 0) }'
        return
    fi
    before=$(psql -X -At -c "SELECT count(*) FROM sbq.messages")
    [ -z "${AB_STATEMENT:-}" ] || psql -X -q -c "SELECT pg_stat_statements_reset()" >/dev/null
    tps=$(PGOPTIONS="$opts" "$new_bin/pgbench" -n -M prepared -c "$clients" -j 2 -T "$secs" -D n="$batch" \
        -D tok=00000000-0000-0000-0000-000000000000 -f "bench/$script.sql" 2>&1 |
        sed -n 's/^tps = \([0-9.]*\) .*/\1/p')
    after=$(psql -X -At -c "SELECT count(*) FROM sbq.messages")
    if [ -n "${AB_STATEMENT:-}" ]; then
        # calls, ms and buffers of the matching statements, into this cell's file
        psql -X -At -F ' ' -v pat="$AB_STATEMENT" >>"$stmt" <<'SQL'
SELECT coalesce(sum(calls), 0), round(coalesce(sum(total_exec_time), 0)::numeric, 1),
       coalesce(sum(shared_blks_hit + shared_blks_read), 0)
  FROM pg_stat_statements WHERE query LIKE :'pat'
SQL
    fi
    scripts/pgserver.sh stop "$work/$c" >/dev/null
    unset PGHOST PGPORT
    if [ "$prefill" -gt 0 ]; then
        [ "$after" -gt 0 ] || echo "ab: $script emptied its queue: raise its prefill" >&2
        awk -v d="$((before - after))" -v s="$secs" 'BEGIN { printf "%.0f", d / s }'
    else
        awk -v t="${tps:-0}" -v p="$per" 'BEGIN { printf "%.0f", t * p }'
    fi
}

# name|script|prefill|messages per transaction|PGOPTIONS|messages held
workloads=(
    "send 1|sbq_send|0|1|"
    "send batch of $batch|sbq_send_batch|0|$batch|"
    "send 1, the server's time (DO block)|do:plain|0|1|"
    "send 1 with a session id, the server's time|do:session|0|1|"
    "receive + complete 1|sbq_consume|200000|1|"
    "receive + complete batch of $batch|sbq_consume_batch|3000000|$batch|"
    "cycle 1 (3 transactions)|sbq_cycle|0|1|"
    "cycle batch of $batch|sbq_cycle_batch|0|$batch|"
    "cycle 1, locks in the rows|sbq_cycle|0|1|-c sbqueue.memory_locks=off"
    "cycle 1 beside 5,000 held|sbq_cycle|0|1||5000"
)
if [ -n "${AB_ONLY:-}" ]; then
    kept=()
    for w in "${workloads[@]}"; do
        grep -Eq -- "$AB_ONLY" <<<"${w%%|*}" && kept+=("$w")
    done
    workloads=("${kept[@]}")
fi
declare -A got
for r in $(seq "$rounds"); do
    for w in "${workloads[@]}"; do
        IFS='|' read -r name script prefill per opts held <<<"$w"
        order=(old new new old)
        [ $((r % 2)) -eq 0 ] && order=(new old old new)
        for c in "${order[@]}"; do
            got["$name|$c"]+="$(cell "$c" "$script" "$prefill" "$per" "$opts" "${held:-0}" \
                "$(stmt_file "$c" "$name")") "
            echo "ab: round $r, $name, $c: ${got["$name|$c"]}" >&2
        done
    done
done

median() { tr ' ' '\n' | grep . | sort -n | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
echo "bench/ab.sh $rev $secs $rounds: messages/second, the median of $((rounds * 2)) cells of ${secs} s each,"
echo "$clients clients, fsync and synchronous_commit on, $(nproc) CPUs$([ "${AB_NO_PRELOAD:-0}" = 1 ] && echo ", sbqueue not preloaded")$([ "${AB_WORKER:-0}" = 1 ] && echo ", the maintenance worker on")"
echo
echo "old: $describe_old"
echo "new: $describe_new"
echo
echo "| workload | old | new | new/old |"
echo "|---|---:|---:|---:|"
for w in "${workloads[@]}"; do
    IFS='|' read -r name script prefill per opts held <<<"$w"
    o=$(median <<<"${got["$name|old"]}")
    n=$(median <<<"${got["$name|new"]}")
    awk -v name="$name" -v o="$o" -v n="$n" 'BEGIN { printf "| %s | %.0f | %.0f | %.2fx |\n", name, o, n, (o > 0 ? n / o : 0) }'
done
if [ -n "${AB_STATEMENT:-}" ]; then
    echo
    echo "The statements LIKE '$AB_STATEMENT' (pg_stat_statements, track = all), the median"
    echo "over the cells of each contender: ms of execution per second of cell, and buffers per call."
    echo
    echo "| workload | old: calls | ms / s | buffers / call | new: calls | ms / s | buffers / call |"
    echo "|---|---:|---:|---:|---:|---:|---:|"
    for w in "${workloads[@]}"; do
        IFS='|' read -r name script prefill per opts held <<<"$w"
        row="| $name"
        for c in old new; do
            f=$(stmt_file "$c" "$name")
            calls=$(awk '{ print $1 }' "$f" | median)
            ms=$(awk -v s="$secs" '{ print $2 / s }' "$f" | median)
            bufs=$(awk '{ print ($1 > 0 ? $3 / $1 : 0) }' "$f" | median)
            row="$row | $calls | $(printf '%.1f' "$ms") | $(printf '%.0f' "$bufs")"
        done
        echo "$row |"
    done
fi
