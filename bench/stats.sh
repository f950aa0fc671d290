#!/usr/bin/env bash
# bench/stats.sh: what reading the queues' numbers costs, by queue depth.
#
#   bench/stats.sh [QUEUES] [DEPTHS] [ROUNDS]   defaults: 100 queues, "10 10000", 5 rounds
#
# Measures the sbqueue installed for $PG_CONFIG (it builds nothing: run `make
# install` first; to measure another build, point PG_CONFIG at a relocated copy
# of PostgreSQL's trees it was installed into, as bench/ab.sh makes). One
# throwaway server (scripts/pgserver.sh --preload, the maintenance worker off so
# that nothing changes between reads). For each depth D: a database with QUEUES
# queues of D messages each, 1 % of them received under a lock (so the counts
# look locks up), then VACUUM ANALYZE. Then ROUNDS times, in turn:
#   stats     SELECT * FROM sbq_queue_stats (every queue)
#   one       SELECT * FROM sbq_queue_stats WHERE queue = 'q1'
#   metrics   SELECT count(*) FROM sbq_metrics (every sample)
#   text      SELECT sbq_metrics_text()
#   node      SELECT * FROM sbq.node_queue_stats (0.14 on: the definition
#             sbq_queue_stats shows; the difference is what the view over it costs)
#   stats, jit off   the first read in a session with jit off (PGOPTIONS), as a
#             monitoring role set so reads it: what compiling the view costs
# each in a session of its own (the first read of a connection: it also fills
# the connection's caches), and then again "warm": one session reads it
# ROUNDS + 1 times and the first read is not counted.
# Prints the median milliseconds of each read at each depth, as a Markdown table
# (n/a: a build before 0.12, which has no sbq_metrics).
set -euo pipefail
cd "$(dirname "$0")/.."
queues=${1:-100}
depths=${2:-"10 10000"}
rounds=${3:-5}

PG_CONFIG=${PG_CONFIG:-/usr/lib/postgresql/${PG_MAJOR:-15}/bin/pg_config}
export PGBIN=${PGBIN:-$("$PG_CONFIG" --bindir)}
export PGUSER=postgres PGDATABASE=postgres
unset PGOPTIONS

work=$(mktemp -d /tmp/sbqueue-stats.XXXXXX)
chmod 755 "$work"
cleanup() {
    scripts/pgserver.sh stop "$work/srv" >/dev/null 2>&1 || true
    rm -rf "$work"
}
trap cleanup EXIT
log() { echo "stats: $(date +%H:%M:%S) $*" >&2; }

port=$(scripts/pgserver.sh start "$work/srv" --preload)
export PGHOST="$work/srv" PGPORT="$port"
psql -X -q -c "ALTER SYSTEM SET sbqueue.enable_maintenance_worker = off" -c "SELECT pg_reload_conf()" >/dev/null

declare -A reads=(
    [stats]="SELECT * FROM sbq_queue_stats"
    [one]="SELECT * FROM sbq_queue_stats WHERE queue = 'q1'"
    [metrics]="SELECT count(*) FROM sbq_metrics"
    [text]="SELECT sbq_metrics_text()"
    [node]="SELECT * FROM sbq.node_queue_stats"
    ["stats, jit off"]="SELECT * FROM sbq_queue_stats"
)
declare -A opts=(["stats, jit off"]="-c jit=off")
order=(stats one metrics text node "stats, jit off")
declare -A got
for d in $depths; do
    db=stats_$d
    log "$queues queues of $d messages"
    psql -X -q -v ON_ERROR_STOP=1 -c "CREATE DATABASE $db"
    psql -X -q -v ON_ERROR_STOP=1 -d "$db" >/dev/null <<SQL
CREATE EXTENSION sbqueue;
SELECT count(sbq_create_queue('q' || i)) FROM generate_series(1, $queues) i;
DO \$\$
DECLARE
    left_ int;
BEGIN
    FOR i IN 1..$queues LOOP
        left_ := $d;
        WHILE left_ > 0 LOOP
            PERFORM sbq_send_batch('q' || i, array_fill('a message body'::text, ARRAY[least(left_, 1000)]));
            left_ := left_ - least(left_, 1000);
        END LOOP;
        COMMIT;
    END LOOP;
END
\$\$;
SELECT count(*) FROM generate_series(1, $queues) i, sbq_receive('q' || i, greatest($d / 100, 1));
VACUUM ANALYZE;
SQL
    # before 0.12 there is no sbq_metrics: those reads are n/a
    has_metrics=$(psql -X -At -d "$db" -c "SELECT to_regclass('sbq_metrics') IS NOT NULL")
    version=$(psql -X -At -d "$db" -c "SELECT extversion FROM pg_extension WHERE extname = 'sbqueue'")
    has_node=$(psql -X -At -d "$db" -c "SELECT to_regclass('sbq.node_queue_stats') IS NOT NULL")
    for r in $(seq "$rounds"); do
        for k in "${order[@]}"; do
            if { [ "$has_metrics" != t ] && [[ $k == metrics || $k == text ]]; } ||
                { [ "$has_node" != t ] && [ "$k" = node ]; }; then
                got[$d/$k]=n/a
                continue
            fi
            ms=$(PGOPTIONS="${opts[$k]:-}" psql -X -q -d "$db" -c '\timing on' -c "${reads[$k]}" | sed -n 's/^Time: \([0-9.]*\) ms.*/\1/p')
            got[$d/$k]="${got[$d/$k]:-} $ms"
        done
    done
    # warm: one session reads ROUNDS + 1 times, the first read not counted
    for k in "${order[@]}"; do
        if { [ "$has_metrics" != t ] && [[ $k == metrics || $k == text ]]; } ||
            { [ "$has_node" != t ] && [ "$k" = node ]; }; then
            got[$d/$k, warm]=n/a
            continue
        fi
        got[$d/$k, warm]=$({ echo '\timing on'; for r in $(seq $((rounds + 1))); do echo "${reads[$k]};"; done; } |
            PGOPTIONS="${opts[$k]:-}" psql -X -q -d "$db" | sed -n 's/^Time: \([0-9.]*\) ms.*/\1/p' | tail -n +2 | tr '\n' ' ')
    done
done
order+=("stats, warm" "one, warm" "metrics, warm" "text, warm" "node, warm" "stats, jit off, warm")

median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }
echo "bench/stats.sh $queues \"$depths\" $rounds: median ms of $rounds reads, sbqueue $version ($PGBIN)"
echo
printf '| read |'; for d in $depths; do printf ' %s x %s msgs |' "$queues" "$d"; done; echo
printf '|---|'; for d in $depths; do printf -- '---:|'; done; echo
for k in "${order[@]}"; do
    printf '| %s |' "$k"
    for d in $depths; do
        if [ "${got[$d/$k]}" = n/a ]; then printf ' n/a |'; else printf ' %s |' "$(median <<<"${got[$d/$k]}")"; fi
    done
    echo
done
