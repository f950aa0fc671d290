#!/usr/bin/env bash
# bench/worker_delay.sh: how long after a lock expires does maintenance
# dead-letter its message, with 1, 10 and 100 databases sharing the
# maintenance workers; and what those databases cost while idle.
#
#   bench/worker_delay.sh [SAMPLES] [N...]     defaults: 30 samples, N = 1 10 100
#
# Measures the sbqueue installed for $PG_CONFIG (it builds nothing: run
# `make install` first). For each N, a fresh throwaway server
# (scripts/pgserver.sh --preload: fsync and synchronous_commit on, the
# launcher and its workers at their defaults: sbqueue.max_workers 2,
# maintenance_interval 1s, idle_maintenance_interval 60s; log_min_messages
# debug1, to count worker starts in the log) with N databases wd001..wdN,
# each with sbqueue and the queue 'q1' (lock_duration 5 s, max_delivery_count
# 1). The helper bench/worker_delay.py then, on that server:
#
#   idle      waits until every database has backed off to the idle interval
#             (sbq_maintenance_status: next_pass_due - last_pass_started =
#             60 s; at most WD_SETTLE_MAX, 150 s) and measures WD_IDLE_SECS
#             (60) s with no client connected: the CPU of the server
#             (utime+stime+cutime+cstime of the postmaster and of its live
#             children, from /proc), the passes (sum of passes in
#             sbq_maintenance_status), the maintenance workers the postmaster
#             started ("starting background worker process" in the log), how
#             many different ones ran a pass, and autovacuum's visits to
#             databases (it too starts a worker per database per minute).
#   samples   in up to 20 of the databases (all of them for N <= 20, else
#             every N/20th), round robin: sbq_send one message, sbq_receive
#             it (its first and last allowed delivery) and keep the
#             locked_until the server returns. Nothing receives from that
#             queue again while the lock runs (a receive would dead-letter
#             the message itself), so only a maintenance pass can move it.
#             From 0.2 s before that time the sample's database is polled
#             every 5 ms, on one autocommit connection per database (the one
#             that sent), with
#               SELECT clock_timestamp(), EXISTS (SELECT 1 FROM
#                 sbq_peek('q1/$deadletterqueue', 1, seq) WHERE sequence_number = seq)
#             delay = the first clock_timestamp() that sees it - locked_until
#             (both the server's clock). Also reported: the dead letter's
#             dead_lettered_at (stamped by the pass) - locked_until; the
#             dead_letter_reason must be MaxDeliveryCountExceeded.
#             concurrent: SAMPLES samples, one starting every 0.5 to 1.5 s
#               (at random: the expiries fall at every phase of a worker's
#               1 s cadence), so about five locks run at once. With N = 1 they
#               share the database (queues q1..q8, one per pending sample):
#               a busy database. With N >= 10 each is in a database of its
#               own that is quiet while its lock runs.
#             isolated: WD_ISOLATED (5) samples, one at a time, each 0 to 1 s
#               after the last one ended.
#             A sample not dead-lettered WD_TIMEOUT (90) s after its lock
#             expired counts as not arrived.
#   baseline  sbqueue.enable_maintenance_worker = off (the workers leave, the
#             launcher idles) and the idle measurement again for
#             WD_BASELINE_SECS (30) s: what the N databases cost without
#             sbqueue's workers (autovacuum, mostly).
#
# The server is stopped before the next N starts; one at a time, so the
# figures are side by side from one run. Prints two Markdown tables and the
# conditions. Exits 3 when a sample never arrived (or with another reason),
# after printing the tables; non-zero on any other failure.
# About 12 minutes with the defaults (each N: ~65 s for the databases to back
# off, the idle minute, ~40 s of concurrent samples, ~30 s of isolated ones,
# the 30 s baseline; 100 databases take ~45 s to create);
# WD_ISOLATED=0 WD_BASELINE_SECS=0 makes it about 9.
#
# Environment: WD_PORT (the port to listen on; default: the first free one),
# WD_ISOLATED, WD_TIMEOUT, WD_SPACING (mean seconds between concurrent samples),
# WD_IDLE_SECS (0: no idle window), WD_SETTLE_MAX, WD_BASELINE_SECS (0: no
# baseline), WD_SAMPLED_DBS (20), WD_POLL_MS (5),
# WD_KEEP (a directory to copy the raw JSON and the server log of each N into).
set -euo pipefail
cd "$(dirname "$0")/.."
samples=${1:-30}
shift || true
ns=${*:-1 10 100}
isolated=${WD_ISOLATED:-5}
PYTHON=${PYTHON:-/usr/bin/python3}      # Debian's, with python3-psycopg

PG_CONFIG=${PG_CONFIG:-/usr/lib/postgresql/${PG_MAJOR:-15}/bin/pg_config}
export PGBIN=${PGBIN:-$("$PG_CONFIG" --bindir)}
export PATH="$PGBIN:$PATH"
export PGUSER=postgres PGDATABASE=postgres
unset PGOPTIONS

"$PYTHON" -c 'import psycopg' 2>/dev/null ||
    { echo "worker_delay: $PYTHON has no psycopg (apt-get install python3-psycopg)" >&2; exit 1; }

work=$(mktemp -d /tmp/sbqueue-worker-delay.XXXXXX)
chmod 755 "$work"
cleanup() {
    for n in $ns; do scripts/pgserver.sh stop "$work/n$n" >/dev/null 2>&1 || true; done
    rm -rf "$work"
}
trap cleanup EXIT
log() { echo "worker_delay: $(date +%H:%M:%S) $*" >&2; }

started=$(date +%s)
files=()
for n in $ns; do
    srv="$work/n$n"
    port=$(scripts/pgserver.sh start "$srv" ${WD_PORT:-} --preload)
    export PGHOST="$srv" PGPORT="$port"
    psql -X -q -v ON_ERROR_STOP=1 -c "ALTER SYSTEM SET log_min_messages = debug1" \
        -c "SELECT pg_reload_conf()" >/dev/null
    log "N=$n: server on port $port"
    "$PYTHON" bench/worker_delay.py run --n "$n" --samples "$samples" --isolated "$isolated" \
        --datadir "$srv/data" --log "$srv/server.log" --out "$work/n$n.json"
    if grep -E ' (WARNING|ERROR|FATAL|PANIC): ' "$srv/server.log" >&2; then
        log "N=$n: the server log has the warnings or errors above"
    fi
    scripts/pgserver.sh stop "$srv" >/dev/null
    cp "$work/n$n.json" "$work/keep-n$n.json"
    if [ -n "${WD_KEEP:-}" ]; then cp "$srv/server.log" "$WD_KEEP/n$n-server.log"; fi
    rm -rf "$srv"
    files+=("$work/keep-n$n.json")
done

rc=0
"$PYTHON" bench/worker_delay.py report "${files[@]}" || rc=$?
echo
echo "(bench/worker_delay.sh $samples $ns, WD_ISOLATED=$isolated; $(($(date +%s) - started)) s;" \
    "$(date -u +%Y-%m-%d); load average at the end: $(cut -d' ' -f1-3 /proc/loadavg))"
if [ -n "${WD_KEEP:-}" ]; then cp "${files[@]}" "$WD_KEEP"/; fi
if [ "$rc" = 3 ]; then log "some samples never arrived or had another reason: see the table"; fi
exit "$rc"
