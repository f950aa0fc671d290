#!/usr/bin/env bash
# bench/settle.sh: settling a batch of locks in one call (0.9) against one call per
# lock, side by side.
#
#   bench/settle.sh [SECONDS] [ROUNDS] [BATCH]   defaults: 10 s cells, 3 rounds, 50
#
# Measures the sbqueue installed for $PG_CONFIG (it builds nothing: run `make
# install` first). One throwaway server (scripts/pgserver.sh --preload: fsync and
# synchronous_commit on, the maintenance worker running), one database. Each
# pgbench transaction (-n -M prepared -c 4 -j 2) receives BATCH messages under
# their locks in one statement (it commits: the locks are held), then settles the
# tokens it got, in one of four ways:
#   loop    one call per token, each a statement of its own, in one transaction:
#           what the clients of 0.8 did for abandon, defer and dead-letter
#   each    one call per token, all in one statement
#           (SELECT sbq_abandon(q, t) FROM unnest(tokens) t): the strongest form
#           of the same without an array form
#   array   the array form, all or nothing (sbq_abandon(q, tokens))
#   settle  sbq_settle(q, tokens, 'abandon'): each token's outcome reported
# for two settlements:
#   abandon the messages go back to the queue (max_delivery_count 1,000,000; the
#           queue is filled with 4 x BATCH messages first), so the next receive
#           gets them again
#   complete a send of BATCH messages (sbq_send_batch) comes first in the
#           transaction's own statement, so the queue stays as it is
# The four take turns cell by cell (their order rotated each round); before
# every cell the queue is refilled, sbq.messages vacuumed and a checkpoint taken.
# Prints the median transactions per second of each, and each one's ratio to
# loop, as a Markdown table.
#
# Environment: SETTLE_PORT (the port; default: the first free one);
# SETTLE_SYNC=off runs pgbench's sessions with synchronous_commit off, which
# takes the wait for the WAL flush out of every commit.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-10}
rounds=${2:-3}
batch=${3:-50}

PG_CONFIG=${PG_CONFIG:-/usr/lib/postgresql/${PG_MAJOR:-15}/bin/pg_config}
export PGBIN=${PGBIN:-$("$PG_CONFIG" --bindir)}
export PATH="$PGBIN:$PATH"
export PGUSER=postgres PGDATABASE=postgres
unset PGOPTIONS

work=$(mktemp -d /tmp/sbqueue-settle.XXXXXX)
chmod 755 "$work"
cleanup() {
    scripts/pgserver.sh stop "$work/srv" >/dev/null 2>&1 || true
    rm -rf "$work"
}
trap cleanup EXIT
log() { echo "settle: $(date +%H:%M:%S) $*" >&2; }
load_at_start=$(cut -d' ' -f1-3 /proc/loadavg)

port=$(scripts/pgserver.sh start "$work/srv" ${SETTLE_PORT:-} --preload)
export PGHOST="$work/srv" PGPORT="$port"
psql -X -q -v ON_ERROR_STOP=1 -c "CREATE DATABASE bench"
psql -X -q -v ON_ERROR_STOP=1 -d bench -c "CREATE EXTENSION sbqueue" \
    -c "SELECT sbq_create_queue('bench', max_delivery_count => 1000000)" >/dev/null

body="'bench message body: 0123456789 abcdefghijklmnopqrstuvwxyz ABCDEFGHIJKLMNOPQRSTUVWXYZ'::text"
receive="SELECT count(*) AS got, coalesce(array_agg(lock_token), '{}') AS toks FROM sbq_receive('bench', $batch) \\gset"
send="SELECT count(*) FROM sbq_send_batch('bench', array_fill($body, ARRAY[$batch]));"
for s in abandon complete; do
    pre=
    [ "$s" = complete ] && pre=$send
    printf '%s\n%s\n%s\n' "$pre" "$receive" \
        "SELECT count(*) FROM (SELECT sbq_$s('bench', t) FROM unnest(:toks::uuid[]) t) x;" \
        > "$work/${s}_each.sql"
    printf '%s\n%s\n%s\n' "$pre" "$receive" \
        "SELECT sbq_$s('bench', :toks::uuid[]);" > "$work/${s}_array.sql"
    printf '%s\n%s\n%s\n' "$pre" "$receive" \
        "SELECT count(*) FROM sbq_settle('bench', :toks::uuid[], '$s');" > "$work/${s}_settle.sql"
    {
        printf '%s\n%s\nBEGIN;\n' "$pre" "$receive"
        for k in $(seq 1 "$batch"); do
            echo "SELECT sbq_$s('bench', (:toks::uuid[])[$k]) WHERE :got::int >= $k;"
        done
        echo "COMMIT;"
    } > "$work/${s}_loop.sql"
done

# one cell: prints transactions per second
cell() {
    local script=$1 out
    psql -X -q -d bench -c "SELECT sbq_purge_queue('bench')" \
        -c "SELECT count(*) FROM sbq_send_batch('bench', array_fill($body, ARRAY[4 * $batch]))" \
        -c "VACUUM sbq.messages" -c "CHECKPOINT" >/dev/null
    out=$(PGOPTIONS="-c synchronous_commit=${SETTLE_SYNC:-on}" \
        pgbench -n -M prepared -c 4 -j 2 -T "$secs" -f "$script" bench 2>&1) || {
        echo "settle: pgbench $script failed:" >&2
        echo "$out" >&2
        return 1
    }
    echo "$out" | sed -n 's/^tps = \([0-9.]*\) .*/\1/p'
}

declare -A results
forms=(loop each array settle)
for r in $(seq 1 "$rounds"); do
    for s in abandon complete; do
        for k in 0 1 2 3; do
            f=${forms[$(((k + r) % 4))]}
            tps=$(cell "$work/${s}_$f.sql")
            log "round $r $s $f: $tps tps"
            results[$s.$f]="${results[$s.$f]:-} $tps"
        done
    done
done

median() { tr ' ' '\n' | sed '/^$/d' | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
echo "| settlement of $batch locks | loop tps | each tps | array tps | settle tps | each / loop | array / loop | settle / loop |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|"
for s in abandon complete; do
    l=$(echo "${results[$s.loop]}" | median)
    e=$(echo "${results[$s.each]}" | median)
    a=$(echo "${results[$s.array]}" | median)
    t=$(echo "${results[$s.settle]}" | median)
    printf '| %s | %.0f | %.0f | %.0f | %.0f | %.2f | %.2f | %.2f |\n' "$s" "$l" "$e" "$a" "$t" \
        "$(echo "$e / $l" | bc -l)" "$(echo "$a / $l" | bc -l)" "$(echo "$t / $l" | bc -l)"
done
echo
echo "($rounds rounds of ${secs} s cells, pgbench -n -M prepared -c 4 -j 2; fsync on,"
echo "synchronous_commit ${SETTLE_SYNC:-on}; medians; load at the start: $load_at_start)"
