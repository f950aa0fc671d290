#!/usr/bin/env bash
# test/citus/run.sh: sbqueue on a three-node Citus cluster (docs/scale-out.md).
#
# Builds Citus from its source archive when it is not installed (the archive is
# looked for in $SBQ_CITUS_SOURCE, else in the vendored sources beside the
# clone, or beside the local repository it was cloned from:
# ../shared/vendor/citus/), starts a coordinator and two workers with
# citus and sbqueue preloaded (scripts/citus_cluster.sh), and checks what the
# scale-out design's first part promises:
#   - CREATE EXTENSION sbqueue on the coordinator (which Citus runs on the
#     workers by PREPARE TRANSACTION / COMMIT PREPARED) starts the maintenance
#     worker of every node within seconds;
#   - a backend on a worker node with Citus beside sbqueue can use every cache
#     of sbqueue's (queues, sends, topics, stats) without running out of
#     relcache callback slots;
#   - sbqueue local on one node works through a Citus coordinator: concurrent
#     consumers complete each message once;
#   - an immediate stop of a worker loses no committed message, and its
#     maintenance comes back;
#   - no node logs an ERROR, FATAL or PANIC it was not asked for;
#   - the pg_regress suite passes through the coordinator, in a database with
#     the citus extension.
# Skipped (exit 77, with the reason) only when Citus cannot be built here.
set -uo pipefail
cd "$(dirname "$0")/../.."
root=$(pwd)
export PG_CONFIG=${PG_CONFIG:-pg_config}
PGBIN=$("$PG_CONFIG" --bindir)
export PGBIN

if [ ! -f "$("$PG_CONFIG" --pkglibdir)/citus.so" ]; then
    # beside this clone, or beside the repository it was cloned from (a local one)
    origin=$(git -C "$root" config --get remote.origin.url 2>/dev/null || true)
    src=${SBQ_CITUS_SOURCE:-$(ls "$root"/../shared/vendor/citus/citus-*.tar.gz \
        ${origin:+"$origin"/../shared/vendor/citus/citus-*.tar.gz} 2>/dev/null | sort -V | tail -1)}
    if [ -z "$src" ] || [ ! -f "$src" ]; then
        echo "citus: SKIPPED: Citus is not installed and no source archive was found" \
            "(set SBQ_CITUS_SOURCE to citus-<version>.tar.gz)"
        exit 77
    fi
    echo "citus: building Citus from $(basename "$src") (about two minutes)"
    if ! scripts/citus_cluster.sh build "$src"; then
        echo "citus: SKIPPED: the Citus build failed (its log is above)"
        exit 77
    fi
fi

work=$(mktemp -d /tmp/sbqueue-citus.XXXXXX)
chmod 755 "$work"
cleanup() {
    scripts/citus_cluster.sh stop "$work" >/dev/null 2>&1
    rm -rf "$work"
}
trap cleanup EXIT

read -r pc pw1 pw2 < <(scripts/citus_cluster.sh start "$work" app) || { echo "citus: the cluster did not start"; exit 1; }
echo "citus: coordinator on port $pc, workers on $pw1 and $pw2"

fails=0
n=0
ok() {
    n=$((n + 1))
    echo "ok $n - $1"
}
not_ok() {
    n=$((n + 1))
    fails=$((fails + 1))
    echo "not ok $n - $1"
}
# is GOT WANT NAME
is() {
    if [ "$1" = "$2" ]; then ok "$3"; else not_ok "$3"; echo "#   got: '$1'"; echo "#   expected: '$2'"; fi
}
q() {
    local port=$1
    shift
    "$PGBIN/psql" -X -q -At -h 127.0.0.1 -p "$port" -U postgres -d app -v ON_ERROR_STOP=1 "$@"
}
# the seconds (one decimal) until SQL on PORT prints WANT, at most LIMIT
wait_for() {
    local port=$1 sql=$2 want=$3 limit=$4 start=$SECONDS t0 got
    t0=$(date +%s.%N)
    while [ $((SECONDS - start)) -lt "$limit" ]; do
        got=$(q "$port" -c "$sql" 2>/dev/null)
        if [ "$got" = "$want" ]; then
            echo "$(date +%s.%N) $t0" | awk '{printf "%.1f", $1 - $2}'
            return 0
        fi
        sleep 0.1
    done
    return 1
}

# --- CREATE EXTENSION on the coordinator: every node's worker within seconds
q "$pc" -c "CREATE EXTENSION sbqueue"
for port in "$pc" "$pw1" "$pw2"; do
    is "$(q "$port" -c "SELECT extversion FROM pg_extension WHERE extname = 'sbqueue'")" \
        "$(sed -n "s/^default_version = '\(.*\)'/\1/p" sbqueue.control)" "sbqueue installed on the node of port $port"
    if t=$(wait_for "$port" "SELECT state FROM sbq_maintenance_status WHERE database = 'app' AND passes > 0" installed 10); then
        ok "the node of port $port has its maintenance passes ${t} s after CREATE EXTENSION"
    else
        not_ok "the node of port $port has its maintenance passes within 10 s of CREATE EXTENSION"
    fi
done

# --- one backend on a worker uses every cache: queues, direct sends, topics, stats
out=$(q "$pw1" <<'EOF' 2>&1
SELECT sbq_create_queue('w1_jobs') IS DISTINCT FROM NULL;
SELECT sbq_send('w1_jobs', 'one'::bytea) > 0;
SELECT count(*) FROM sbq_send_batch('w1_jobs', ARRAY['two']::text[]);
SELECT count(*) FROM sbq_peek('w1_jobs', 10);
SELECT count(sbq_complete('w1_jobs', r.lock_token)) FROM sbq_receive('w1_jobs', 10) r;
SELECT sbq_create_topic('w1_news') IS DISTINCT FROM NULL;
SELECT sbq_create_subscription('w1_news', 'all') IS DISTINCT FROM NULL;
SELECT sbq_send('w1_news', 'news'::bytea) > 0;
SELECT count(*) FROM sbq_receive('w1_news/subscriptions/all', 10, receive_mode => 'receive_and_delete');
SELECT active_count, completed FROM sbq_queue_stats WHERE queue = 'w1_jobs';
EOF
)
is "$(echo "$out" | tr '\n' ' ')" "t t 1 2 2 t t t 1 0|2 " "a worker's backend sends, receives, settles, fans out and reads the stats, alive"

# --- sbqueue local on the coordinator, used through it: 4 consumers, each message once
q "$pc" -c "SELECT sbq_create_queue('work', lock_duration => '5 seconds')" >/dev/null
q "$pc" -c "SELECT count(sbq_send('work', ('m' || g)::bytea, message_id => 'm' || g)) FROM generate_series(1, 400) g" >/dev/null
for c in 1 2 3 4; do
    (
        for _ in $(seq 1 40); do
            q "$pc" -c "SELECT string_agg(r.message_id || ':' || sbq_complete('work', r.lock_token)::text, E'\n')
                          FROM sbq_receive('work', 7) r" 2>>"$work/consumer.err"
        done
    ) >"$work/consumer.$c" &
done
wait
is "$(cat "$work"/consumer.[1-4] | grep -c .)" 400 "4 consumers through the coordinator completed 400 messages"
is "$(cat "$work"/consumer.[1-4] | grep . | sort -u | wc -l)" 400 "... each one once"
is "$(cat "$work/consumer.err")" "" "... with no error (a complete whose lock was lost raises one)"
is "$(q "$pc" -c "SELECT active_count + locked_count, completed FROM sbq_queue_stats WHERE queue = 'work'")" "0|400" \
    "the coordinator's stats: none left, 400 completed"

# --- an immediate stop of a worker loses no committed message
q "$pw2" -c "SELECT sbq_create_queue('w2_safe')" >/dev/null
q "$pw2" -c "SELECT count(sbq_send('w2_safe', ('s' || g)::bytea)) FROM generate_series(1, 50) g" >/dev/null
as_pg=()
[ "$(id -u)" = 0 ] && as_pg=(runuser -u postgres --)
"${as_pg[@]}" "$PGBIN/pg_ctl" -D "$work/w2/data" -m immediate -w stop >/dev/null
"${as_pg[@]}" "$PGBIN/pg_ctl" -D "$work/w2/data" -o "-p $pw2" -l "$work/w2/server.log" -w start >/dev/null
is "$(q "$pw2" -c "SELECT count(*) FROM sbq_peek('w2_safe', 100)")" 50 "after an immediate stop the worker has its 50 committed messages"
if t=$(wait_for "$pw2" "SELECT state FROM sbq_maintenance_status WHERE database = 'app' AND passes > 0" installed 15); then
    ok "its maintenance passes are back ${t} s after the restart"
else
    not_ok "its maintenance passes are back within 15 s of the restart"
fi

# --- no node logged an error of its own
for node in coord w1 w2; do
    errs=$(grep -E "(ERROR|FATAL|PANIC):" "$work/$node/server.log" |
        grep -v -E "terminating connection because of crash|the database system is (starting up|shutting down)|connection to the remote node" || true)
    is "$errs" "" "no ERROR, FATAL or PANIC in the log of $node"
done

# --- the regression suite in a database with citus, through the coordinator
# (sbqueue local there); last, as it logs the errors it provokes. (The isolation
# specs pass too, in 80 s more than CI has to spare.) Function propagation off:
# the suite makes helper functions in pg_temp, which Citus would warn it cannot
# propagate
q "$pc" -d postgres -c "ALTER SYSTEM SET sbqueue.enable_maintenance_worker = off" -c "SELECT pg_reload_conf()" >/dev/null
rm -rf results regression.diffs regression.out output_iso
if PGOPTIONS="-c citus.enable_ddl_propagation=off" PGUSER=postgres \
    make -s PG_CONFIG="$PG_CONFIG" installcheck ISOLATION= \
    EXTRA_REGRESS_OPTS="--load-extension=citus --host=127.0.0.1 --port=$pc" \
    >"$work/regress.log" 2>&1; then
    ok "the pg_regress suite passes on the coordinator, in a database with citus"
else
    not_ok "the pg_regress suite passes on the coordinator, in a database with citus"
    tail -20 "$work/regress.log"
    cat regression.diffs output_iso/regression.diffs 2>/dev/null | head -60
fi

echo "1..$n"
if [ "$fails" -gt 0 ]; then
    echo "citus: $fails of $n checks failed"
    for node in coord w1 w2; do
        echo "--- the end of $node's log"
        tail -20 "$work/$node/server.log"
    done
    exit 1
fi
echo "citus: all $n checks passed"
