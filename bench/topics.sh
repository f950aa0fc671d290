#!/usr/bin/env bash
# bench/topics.sh: sends to topics (0.10) against the same work done without
# them, side by side.
#
#   bench/topics.sh [SECONDS] [ROUNDS]   defaults: 10 s cells, 3 rounds
#   TOPICS_SCALE="1000 10000"            the correlation filter counts of the scaling
#                                        phase ("" skips it; 100000 works, but
#                                        making its rules takes most of an hour:
#                                        each sbq_add_rule counts the topic's rules)
#
# Measures the sbqueue installed for $PG_CONFIG (it builds nothing: run `make
# install` first). One throwaway server (scripts/pgserver.sh --preload: fsync and
# synchronous_commit on, the maintenance worker running), one database; pgbench
# -n -M prepared -c 4 -j 2, each transaction one statement:
#   fan-out   topic   sbq_send to a topic with 10 subscriptions, each with the rule
#                     $Default: 10 copies a transaction
#             queues  sbq_send of the same message to 10 queues in one statement
#                     (SELECT sbq_send(q, ...) FROM unnest(queues) q): the same 10
#                     messages without a topic
#   filters   default sbq_send to a topic with one subscription ($Default)
#             sql100  sbq_send to a topic with 100 subscriptions, subscription N with
#                     the SQL filter region = 'rN' AND amount > 100; the message
#                     (region r50, amount 500) matches one
#             corr100 the same with correlation filters {"properties": {"region":
#                     "rN"}}
# Every message carries the application properties {"region": "r50", "amount":
# 500}. The cells take turns (their order rotated each round); before each the
# subscriptions and queues are purged, the message table vacuumed and a checkpoint
# taken. Prints the median transactions per second of each cell, and the ratios
# the targets are about: copies stored per second by the topic against messages
# stored per second by the 10 sends (target at least 0.8), and what a send to
# sql100 costs against one to default (target under 3).
# Then, how matching scales with the number of correlation filters (one client,
# pgbench -c 1, the same rounds): for each count N, a topic of min(N, 2000)
# subscriptions with N filters in all, {"properties": {"region": "rK"}} (filed
# under region's value: the index finds the one that matches) against the same
# with {"properties": {"n": K}} (numbers are not indexed: every filter is
# compared); the message has region r50 and n 50, and matches one of each.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-10}
rounds=${2:-3}

PG_CONFIG=${PG_CONFIG:-/usr/lib/postgresql/${PG_MAJOR:-15}/bin/pg_config}
export PGBIN=${PGBIN:-$("$PG_CONFIG" --bindir)}
export PATH="$PGBIN:$PATH"
export PGUSER=postgres PGDATABASE=postgres
unset PGOPTIONS

work=$(mktemp -d /tmp/sbqueue-topics.XXXXXX)
chmod 755 "$work"
cleanup() {
    scripts/pgserver.sh stop "$work/srv" >/dev/null 2>&1 || true
    rm -rf "$work"
}
trap cleanup EXIT
log() { echo "topics: $(date +%H:%M:%S) $*" >&2; }
load_at_start=$(cut -d' ' -f1-3 /proc/loadavg)

port=$(scripts/pgserver.sh start "$work/srv" ${TOPICS_PORT:-} --preload)
export PGHOST="$work/srv" PGPORT="$port"
psql -X -q -v ON_ERROR_STOP=1 -c "CREATE DATABASE bench"
psql -X -q -v ON_ERROR_STOP=1 -d bench >/dev/null <<'SQL'
CREATE EXTENSION sbqueue;
SELECT sbq_create_topic('fan');
SELECT sbq_create_subscription('fan', 's' || i), sbq_create_queue('q' || i) FROM generate_series(1, 10) i;
SELECT sbq_create_topic('default');
SELECT sbq_create_subscription('default', 's');
SELECT sbq_create_topic('sql100');
SELECT sbq_create_topic('corr100');
SELECT sbq_create_subscription(t, 's' || i), sbq_remove_rule(t, 's' || i, '$Default'),
       CASE t WHEN 'sql100'
              THEN sbq_add_rule(t, 's' || i, 'r', sql_filter => format('region = %L AND amount > 100', 'r' || i))
              ELSE sbq_add_rule(t, 's' || i, 'r', correlation_filter => jsonb_build_object('properties',
                                                        jsonb_build_object('region', 'r' || i))) END
  FROM generate_series(1, 100) i, unnest(ARRAY['sql100', 'corr100']) t;
SQL

props="application_properties => '{\"region\": \"r50\", \"amount\": 500}'"
body="'bench message body: 0123456789 abcdefghijklmnopqrstuvwxyz ABCDEFGHIJKLMNOPQRSTUVWXYZ'::text"
echo "SELECT sbq_send('fan', $body, $props);" > "$work/topic.sql"
echo "SELECT count(sbq_send(q, $body, $props)) FROM unnest(ARRAY['q1','q2','q3','q4','q5','q6','q7','q8','q9','q10']) q;" \
    > "$work/queues.sql"
for t in default sql100 corr100; do
    echo "SELECT sbq_send('$t', $body, $props);" > "$work/$t.sql"
done

# one cell: prints transactions per second
cell() {
    local script=$1 out
    psql -X -q -d bench -c "SELECT count(sbq_purge_queue(queue)) FROM sbq_queues" \
        -c "VACUUM sbq.messages" -c "CHECKPOINT" >/dev/null
    out=$(pgbench -n -M prepared -c 4 -j 2 -T "$secs" -f "$script" bench 2>&1) || {
        echo "topics: pgbench $script failed:" >&2
        echo "$out" >&2
        return 1
    }
    echo "$out" | sed -n 's/^tps = \([0-9.]*\) .*/\1/p'
}

declare -A results
cells=(topic queues default sql100 corr100)
n=${#cells[@]}
for r in $(seq 1 "$rounds"); do
    for k in $(seq 0 $((n - 1))); do
        c=${cells[$(((k + r) % n))]}
        tps=$(cell "$work/$c.sql")
        log "round $r $c: $tps tps"
        results[$c]="${results[$c]:-} $tps"
    done
done

median() { tr ' ' '\n' | sed '/^$/d' | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
declare -A m
for c in "${cells[@]}"; do m[$c]=$(echo "${results[$c]}" | median); done
echo "| cell | tps | messages stored / s |"
echo "|---|---:|---:|"
printf '| fan-out: topic, 10 subscriptions | %.0f | %.0f |\n' "${m[topic]}" "$(echo "${m[topic]} * 10" | bc -l)"
printf '| fan-out: 10 queues, one statement | %.0f | %.0f |\n' "${m[queues]}" "$(echo "${m[queues]} * 10" | bc -l)"
printf '| filters: topic, 1 subscription ($Default) | %.0f | %.0f |\n' "${m[default]}" "${m[default]}"
printf '| filters: topic, 100 SQL filters, 1 matches | %.0f | %.0f |\n' "${m[sql100]}" "${m[sql100]}"
printf '| filters: topic, 100 correlation filters, 1 matches | %.0f | %.0f |\n' "${m[corr100]}" "${m[corr100]}"
echo
printf 'fan-out: copies per second, topic / 10 queues: %.2f (target >= 0.8)\n' "$(echo "${m[topic]} / ${m[queues]}" | bc -l)"
printf 'filters: cost of a send to sql100 / to default: %.2f (target < 3); corr100 / default: %.2f\n' \
    "$(echo "${m[default]} / ${m[sql100]}" | bc -l)" "$(echo "${m[default]} / ${m[corr100]}" | bc -l)"
echo
echo "($rounds rounds of ${secs} s cells, pgbench -n -M prepared -c 4 -j 2; fsync and"
echo "synchronous_commit on; medians; load at the start: $load_at_start)"

scale=${TOPICS_SCALE-1000 10000}
[ -n "$scale" ] || exit 0
echo
echo "| correlation filters | indexed (string): ms a send | compared one by one (number): ms a send | one by one / indexed |"
echo "|---:|---:|---:|---:|"
for n in $scale; do
    subs=$(( n < 2000 ? n : 2000 ))
    per=$(( n / subs ))
    log "making 2 topics of $subs subscriptions with $n correlation filters"
    psql -X -q -v ON_ERROR_STOP=1 -d bench >/dev/null <<SQL
SELECT sbq_create_topic(t) FROM unnest(ARRAY['str$n', 'num$n']) t;
SELECT sbq_create_subscription(t, 's' || i), sbq_remove_rule(t, 's' || i, '\$Default')
  FROM generate_series(1, $subs) i, unnest(ARRAY['str$n', 'num$n']) t;
SELECT count(sbq_add_rule(t, 's' || i, 'r' || j, correlation_filter =>
                 CASE t WHEN 'str$n' THEN jsonb_build_object('properties', jsonb_build_object('region', 'r' || ((i - 1) * $per + j)))
                        ELSE jsonb_build_object('properties', jsonb_build_object('n', (i - 1) * $per + j)) END))
  FROM generate_series(1, $subs) i, generate_series(1, $per) j, unnest(ARRAY['str$n', 'num$n']) t;
SQL
    props1="application_properties => '{\"region\": \"r50\", \"n\": 50}'"
    for t in "str$n" "num$n"; do
        echo "SELECT sbq_send('$t', $body, $props1);" > "$work/$t.sql"
    done
    for r in $(seq 1 "$rounds"); do
        for t in "str$n" "num$n"; do
            psql -X -q -d bench -c "SELECT count(sbq_purge_queue(queue)) FROM sbq_queues WHERE queue LIKE '$t/%'" >/dev/null
            out=$(pgbench -n -M prepared -c 1 -T "$secs" -f "$work/$t.sql" bench 2>&1)
            tps=$(echo "$out" | sed -n 's/^tps = \([0-9.]*\) .*/\1/p')
            log "round $r $t: $tps tps"
            results[$t]="${results[$t]:-} $tps"
        done
    done
    a=$(echo "${results[str$n]}" | median)
    b=$(echo "${results[num$n]}" | median)
    printf '| %d | %.3f | %.3f | %.1f |\n' "$n" "$(echo "1000 / $a" | bc -l)" "$(echo "1000 / $b" | bc -l)" \
        "$(echo "$a / $b" | bc -l)"
    psql -X -q -d bench -c "SELECT sbq_delete_topic(t) FROM unnest(ARRAY['str$n', 'num$n']) t" >/dev/null
done
echo
echo "(one client, pgbench -n -M prepared -c 1, $rounds rounds of ${secs} s cells, medians; the"
echo "cache of each backend holds the topics' rules parsed and indexed, so the first send"
echo "that reads them is not counted apart)"
