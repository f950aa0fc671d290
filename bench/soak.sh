#!/usr/bin/env bash
# bench/soak.sh: a long steady run of send / receive / settle with abandons and
# expiring locks, with one session holding a transaction (and so the xmin
# horizon) open through the middle third. Samples table and index sizes, dead
# tuples and HOT updates every interval, computes p50/p99 latency per interval
# from pgbench's transaction logs, and prints a Markdown report.
#
#   bench/soak.sh [minutes]          default 30; not part of the test suite
#
# Environment: SOAK_SEND_RATE (messages/s, default 300), SOAK_RECV_RATE
# (receives/s, default 400), SOAK_SAMPLE (seconds between samples, default 60).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

minutes=${1:-30}
send_rate=${SOAK_SEND_RATE:-300}
recv_rate=${SOAK_RECV_RATE:-400}
sample=${SOAK_SAMPLE:-60}
total=$((minutes * 60))
hold_from=$((total / 3))
hold_for=$((total / 3))

scripts/setup.sh >/dev/null
work=$(mktemp -d /tmp/sbqueue-soak.XXXXXX)
chmod 755 "$work"
cleanup() {
    jobs -p | xargs -r kill 2>/dev/null || true
    scripts/pgserver.sh stop "$work/pg" >/dev/null 2>&1 || true
}
trap cleanup EXIT

port=$(scripts/pgserver.sh start "$work/pg" --preload)
export PGHOST="$work/pg" PGPORT="$port" PGUSER=postgres PGDATABASE=postgres
psql -X -q -v ON_ERROR_STOP=1 -f bench/soak_setup.sql >/dev/null

echo "soak: $minutes min, sends $send_rate/s, receives $recv_rate/s, a transaction held open from ${hold_from}s for ${hold_for}s" >&2
start=$(date +%s)

# the sampler: one line every $sample seconds
(
    while :; do
        psql -X -At -F ' ' -c "
            SELECT extract(epoch FROM now())::bigint - $start,
                   pg_relation_size('sbq.messages'),
                   pg_indexes_size('sbq.messages'),
                   coalesce(n_live_tup, 0), coalesce(n_dead_tup, 0),
                   coalesce(n_tup_upd, 0), coalesce(n_tup_hot_upd, 0),
                   (SELECT active_count + locked_count FROM sbq_queue_stats WHERE queue = 'soak'),
                   (SELECT dead_letter_count FROM sbq_queue_stats WHERE queue = 'soak')
              FROM pg_stat_user_tables WHERE relid = 'sbq.messages'::regclass" 2>/dev/null || true
        sleep "$sample"
    done
) >"$work/samples.txt" &

# the session that pins the xmin horizon through the middle third
(
    sleep "$hold_from"
    psql -X -q -c "BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT count(*) FROM sbq.queues; SELECT pg_sleep($hold_for); COMMIT;" >/dev/null
) &

cd "$work"
pgbench -n -M prepared -c 2 -j 1 -T "$total" -R "$send_rate" -l --log-prefix=send \
    -f "$root/bench/soak_producer.sql" >"$work/send.out" 2>&1 &
producer=$!
pgbench -n -M prepared -c 4 -j 1 -T "$total" -R "$recv_rate" -l --log-prefix=recv \
    -f "$root/bench/soak_consumer.sql" >"$work/recv.out" 2>&1
wait "$producer"
cd "$root"
sleep 2

/usr/bin/python3 bench/soak_report.py "$work" "$start" "$sample" "$hold_from" "$hold_for" \
    "$minutes" "$send_rate" "$recv_rate"
