#!/usr/bin/env bash
# bench/citus.sh: what a call costs on a Citus cluster with sbqueue distributed
# (docs/scale-out.md, Capacity).
#
#   bench/citus.sh [SECONDS] [ROUNDS]      defaults: 8 s cells, 3 rounds; about 4 minutes
#   CITUS_SEND_ONLY=1 bench/citus.sh       the worker's own time per send alone
#
# Measures the sbqueue and Citus installed for $PG_CONFIG (it builds nothing: run
# `make install` first, and scripts/citus_cluster.sh build for Citus). Starts a
# throwaway cluster (scripts/citus_cluster.sh: a coordinator and two workers on this
# machine, citus and sbqueue preloaded), runs sbq_distribute(), creates 40 queues
# through the coordinator and keeps those Citus placed on the first worker. Cells
# (pgbench -M prepared, 4 clients, a queue picked at random among those for each
# call), each on the worker itself (its own queues: no routing) and through the
# coordinator (every call routed to the worker), taking turns round by round:
#   send               sbq_send of 5 bytes
#   receive + complete one message received and completed in one statement (the
#                      queues are filled by the send cells before)
# The worker's own time per send comes first (a DO block of 20,000 sbq_send on one of
# its queues, the median of 5; then the same alternating between two of its queues in
# different shard groups), then, on the coordinator, a cluster-wide view
# (sbq_queue_stats of the 40 empty queues, every node's groups):
#   view               a statement of its own (each node reads in a transaction of its own)
#   view in a block    BEGIN; the same; COMMIT (the caller's transaction on every node,
#                      which Citus commits with PREPARE and COMMIT PREPARED)
# Prints transactions per second of each cell and the medians, with the ratios
# coordinator / worker and view / view in a block.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-8}
rounds=${2:-3}
export PG_CONFIG=${PG_CONFIG:-pg_config}
B=$("$PG_CONFIG" --bindir)
work=$(mktemp -d /tmp/sbqueue-bench-citus.XXXXXX)
chmod 755 "$work"
trap 'scripts/citus_cluster.sh stop "$work" >/dev/null 2>&1; rm -rf "$work"' EXIT

read -r pc pw1 _ < <(scripts/citus_cluster.sh start "$work" app)
q() { "$B/psql" -X -q -At -h 127.0.0.1 -p "$1" -U postgres -d app -v ON_ERROR_STOP=1 "${@:2}"; }
q "$pc" -c "CREATE EXTENSION sbqueue" -c "SET client_min_messages = warning" -c "SELECT sbq_distribute()"
q "$pc" -c "SELECT count(sbq_create_queue('b' || g)) FROM generate_series(1, 40) g" >/dev/null
local_queues=$(q "$pc" -c "SELECT string_agg('b' || g, ',') FROM generate_series(1, 40) g
    WHERE (SELECT n.nodeport FROM pg_dist_placement p JOIN pg_dist_node n USING (groupid)
            WHERE p.shardid = get_shard_id_for_distribution_column('sbq.queues', sbq.entity_key('b' || g))) = $pw1")
n=$(echo "$local_queues" | tr ',' '\n' | wc -l)
echo "citus.sh: $n of the 40 queues are on the worker of port $pw1"
# the worker's own time per plain send (no client, no commit): 20,000 sbq_send in a DO
# block on one of its queues, the median of 5, the queue purged after
first=${local_queues%%,*}
# own_us QUEUE_EXPR: the median of 5 DO blocks of 20,000 sbq_send(QUEUE_EXPR, ...), in us a
# send (QUEUE_EXPR may use g, the send's number)
own_us() {
    for _ in 1 2 3 4 5; do
        q "$pw1" -c "DO \$\$ DECLARE t0 timestamptz := clock_timestamp(); BEGIN
                       PERFORM sbq_send($1, 'hello') FROM generate_series(1, 20000) g;
                       RAISE NOTICE '%', round(extract(epoch FROM clock_timestamp() - t0) * 1e6 / 20000, 2);
                     END \$\$" 2>&1 | sed -n 's/^NOTICE: *//p'
    done | sort -n | sed -n 3p
}
us=$(own_us "'$first'")
q "$pc" -c "SELECT sbq_purge_queue('$first')" >/dev/null
echo "citus.sh: the worker's own time per send (a DO block of 20,000): $us us"
# the same, each send to the other of two queues of the worker in different shard groups
# (a node stores into the shard of each call's group in turn)
other=$(q "$pc" -c "SELECT q FROM unnest('{$local_queues}'::text[]) q
    WHERE get_shard_id_for_distribution_column('sbq.queues', sbq.entity_key(q)) <>
          get_shard_id_for_distribution_column('sbq.queues', sbq.entity_key('$first')) LIMIT 1")
us2=$(own_us "CASE g % 2 WHEN 0 THEN '$first' ELSE '$other' END")
q "$pc" -c "SELECT sbq_purge_queue('$first')" -c "SELECT sbq_purge_queue('$other')" >/dev/null
echo "citus.sh: the same, alternating between two queues in different shard groups: $us2 us"
# CITUS_SEND_ONLY=1: that figure alone (to compare builds, each installed in turn)
[ -n "${CITUS_SEND_ONLY:-}" ] && exit 0
cat >"$work/send.sql" <<SQL
\\set i random(1, $n)
SELECT sbq_send(('{$local_queues}'::text[])[:i], 'hello');
SQL
cat >"$work/cycle.sql" <<SQL
\\set i random(1, $n)
SELECT sbq_complete(r.q, r.lock_token)
  FROM (SELECT ('{$local_queues}'::text[])[:i] AS q) x,
       LATERAL (SELECT x.q, m.lock_token FROM sbq_receive(x.q) m) r;
SQL
cat >"$work/view.sql" <<SQL
SELECT count(*) FROM sbq_queue_stats;
SQL
cat >"$work/view_block.sql" <<SQL
BEGIN;
SELECT count(*) FROM sbq_queue_stats;
COMMIT;
SQL
cell() {
    "$B/pgbench" -n -M prepared -c 4 -j 2 -T "$secs" -h 127.0.0.1 -p "$1" -U postgres -f "$2" app 2>&1 |
        sed -n 's/^tps = \([0-9.]*\) .*/\1/p' | cut -d. -f1
}
declare -A all
# the views first, while the queues are empty (a view's cost grows with their depth)
for round in $(seq 1 "$rounds"); do
    v=$(cell "$pc" "$work/view.sql")
    vb=$(cell "$pc" "$work/view_block.sql")
    echo "citus.sh: round $round, coordinator: view $v/s, view in a block $vb/s"
    all[view]+="$v "
    all[view_block]+="$vb "
done
for round in $(seq 1 "$rounds"); do
    for where in worker coordinator; do
        port=$pc
        [ "$where" = worker ] && port=$pw1
        s=$(cell "$port" "$work/send.sql")
        c=$(cell "$port" "$work/cycle.sql")
        echo "citus.sh: round $round, $where: send $s/s, receive + complete $c/s"
        all[$where.send]+="$s "
        all[$where.cycle]+="$c "
    done
done
median() { tr ' ' '\n' | grep . | sort -n | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }
echo
echo "| call | on the worker, its queues local | through the coordinator, routed | ratio |"
echo "|---|---:|---:|---:|"
for w in send cycle; do
    a=$(echo "${all[worker.$w]}" | median)
    b=$(echo "${all[coordinator.$w]}" | median)
    name=send
    [ "$w" = cycle ] && name="receive + complete"
    echo "| $name | $a/s | $b/s | $(awk -v a="$a" -v b="$b" 'BEGIN {printf "%.2fx", b / a}') |"
done
a=$(echo "${all[view]}" | median)
b=$(echo "${all[view_block]}" | median)
echo
echo "| sbq_queue_stats through the coordinator | a statement of its own | in BEGIN ... COMMIT | ratio |"
echo "|---|---:|---:|---:|"
echo "| reads of every node's groups | $a/s | $b/s | $(awk -v a="$a" -v b="$b" 'BEGIN {printf "%.2fx", a / b}') |"
