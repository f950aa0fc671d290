#!/usr/bin/env bash
# bench/rights.sh: what queue rights cost a call, side by side with the same
# library on the SQL of 0.4, which has none.
#
#   bench/rights.sh [SECONDS] [ROUNDS]     defaults: 10 s cells, 3 rounds
#
# Measures the sbqueue installed for $PG_CONFIG (it builds nothing: run
# `make install` first). One throwaway server (scripts/pgserver.sh --preload:
# fsync and synchronous_commit on, the maintenance worker running) with two
# databases, each with the queue 'bench', used by the role bench_app (not a
# superuser, as an application is):
#   legacy  the extension at 0.4 (CREATE EXTENSION ... VERSION '0.4'): the
#           calls run as their caller, on the table privileges 0.4's README
#           gives bench_app
#   rights  the extension at 0.5: every call switches to the owner of the
#           tables for its statements and checks bench_app's queue rights
#           (send and listen, granted with sbq_grant)
# Workloads (pgbench -n -M prepared -c 4 -j 2, as bench_app): a send
# (bench/sbq_send.sql) and the full cycle of one message: send, receive,
# complete (bench/sbq_cycle.sql). The two take turns cell by cell (legacy
# rights, then rights legacy), ROUNDS times; before every cell the queue is
# purged, sbq.messages vacuumed and a checkpoint taken. Prints the median
# transactions per second of each and rights/legacy as a Markdown table.
#
# Environment: RIGHTS_PORT (the port to listen on; default: the first free one);
# RIGHTS_SYNC=off runs pgbench's sessions with synchronous_commit off, which
# takes the wait for the WAL flush out of every commit and leaves the CPU cost
# of the calls.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-10}
rounds=${2:-3}

PG_CONFIG=${PG_CONFIG:-/usr/lib/postgresql/${PG_MAJOR:-15}/bin/pg_config}
export PGBIN=${PGBIN:-$("$PG_CONFIG" --bindir)}
export PATH="$PGBIN:$PATH"
export PGUSER=postgres PGDATABASE=postgres
unset PGOPTIONS

work=$(mktemp -d /tmp/sbqueue-rights.XXXXXX)
chmod 755 "$work"
cleanup() {
    scripts/pgserver.sh stop "$work/srv" >/dev/null 2>&1 || true
    rm -rf "$work"
}
trap cleanup EXIT
log() { echo "rights: $(date +%H:%M:%S) $*" >&2; }
load_at_start=$(cut -d' ' -f1-3 /proc/loadavg)

port=$(scripts/pgserver.sh start "$work/srv" ${RIGHTS_PORT:-} --preload)
export PGHOST="$work/srv" PGPORT="$port"
psql -X -q -v ON_ERROR_STOP=1 -c "CREATE ROLE bench_app LOGIN" \
    -c "CREATE DATABASE legacy" -c "CREATE DATABASE rights"
psql -X -q -v ON_ERROR_STOP=1 -d legacy \
    -c "CREATE EXTENSION sbqueue VERSION '0.4'" \
    -c "SELECT sbq_create_queue('bench')" \
    -c "GRANT USAGE ON SCHEMA sbq TO bench_app" \
    -c "GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA sbq TO bench_app" \
    -c "GRANT USAGE ON ALL SEQUENCES IN SCHEMA sbq TO bench_app" \
    -c "GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA sbq TO bench_app" >/dev/null
psql -X -q -v ON_ERROR_STOP=1 -d rights \
    -c "CREATE EXTENSION sbqueue" \
    -c "SELECT sbq_create_queue('bench')" \
    -c "SELECT sbq_grant('bench', 'bench_app', ARRAY['send', 'listen'])" >/dev/null

# one cell: prints transactions per second
cell() {
    local db=$1 script=$2 out
    psql -X -q -d "$db" -c "SELECT sbq_purge_queue('bench')" >/dev/null
    psql -X -q -d "$db" -c "VACUUM sbq.messages" -c "CHECKPOINT" >/dev/null
    out=$(PGOPTIONS="-c synchronous_commit=${RIGHTS_SYNC:-on}" \
        pgbench -n -M prepared -c 4 -j 2 -T "$secs" -U bench_app -f "$script" "$db" 2>&1) || {
        echo "rights: pgbench $script on $db failed:" >&2
        echo "$out" >&2
        return 1
    }
    echo "$out" | sed -n 's/^tps = \([0-9.]*\) .*/\1/p'
}

declare -A results
for r in $(seq 1 "$rounds"); do
    for w in send cycle; do
        order="legacy rights"
        [ $((r % 2)) -eq 0 ] && order="rights legacy"
        for db in $order; do
            tps=$(cell "$db" "bench/sbq_$w.sql")
            log "round $r $w $db: $tps tps"
            results[$w.$db]="${results[$w.$db]:-} $tps"
        done
    done
done

median() { tr ' ' '\n' | sed '/^$/d' | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
echo "| workload | legacy (0.4 SQL) tps | rights (0.5) tps | rights / legacy |"
echo "|---|---|---|---|"
for w in send cycle; do
    l=$(echo "${results[$w.legacy]}" | median)
    n=$(echo "${results[$w.rights]}" | median)
    printf '| %s | %.0f | %.0f | %.2f |\n' "$w" "$l" "$n" "$(echo "$n / $l" | bc -l)"
done
echo
echo "($rounds rounds of ${secs} s cells, pgbench -n -M prepared -c 4 -j 2 as a role that is"
echo "not a superuser; fsync on, synchronous_commit ${RIGHTS_SYNC:-on}; medians; load at the start:"
echo "$load_at_start)"
