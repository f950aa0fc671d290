#!/usr/bin/env bash
# scripts/test.sh: the whole test suite. Installs what is missing, builds and
# installs sbqueue, starts a throwaway PostgreSQL server on a free local port,
# runs every suite against it, stops it, and exits non-zero if any suite failed.
set -uo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

scripts/setup.sh || exit 1
export PG_CONFIG=${PG_CONFIG:-/usr/lib/postgresql/${PG_MAJOR:-15}/bin/pg_config}
# Debian's python3-psycopg belongs to Debian's python3
PYTHON=${PYTHON:-/usr/bin/python3}

work=$(mktemp -d /tmp/sbqueue-test.XXXXXX)
chmod 755 "$work"
cleanup() {
    [ -n "${citus_build:-}" ] && { kill -- "-$citus_build" || kill "$citus_build"; } 2>/dev/null
    scripts/pgserver.sh stop "$work/pg" >/dev/null 2>&1
    rm -rf "$work"
}
trap cleanup EXIT

# preloaded, as in production: receives lock messages in shared memory
port=$(scripts/pgserver.sh start "$work/pg" --preload) || exit 1
export PGHOST="$work/pg" PGPORT="$port" PGUSER=postgres
# the suites call sbq_maintain() themselves and count what it did: no worker
# in between (the TAP tests start servers of their own with the worker on)
psql -X -q -d postgres -c "ALTER SYSTEM SET sbqueue.enable_maintenance_worker = off" \
    -c "SELECT pg_reload_conf()" >/dev/null || exit 1
echo "test: PostgreSQL on port $port (sbqueue preloaded)"

# Citus is not in Debian's archive: on a machine without it the Citus suite
# builds it from source, about two minutes of compiling. That build starts now,
# beside the suites before it, and the Citus suite waits for it (and builds
# again, or says why it is skipped, if this one failed). timeout gives the
# build a process group of its own (its pid), which it and cleanup end whole.
citus_build=
if [ ! -f "$("$PG_CONFIG" --pkglibdir)/citus.so" ]; then
    timeout 900 bash test/citus/run.sh --build >"$work/citus-build.log" 2>&1 &
    citus_build=$!
    echo "test: building Citus in the background (pid $citus_build)"
fi

passed=0
failed=0
skipped=0
failures=()
# a suite that exits 77 could not run here (it says why): skipped, not failed
suite() {
    local name=$1 start=$SECONDS rc
    shift
    echo
    echo "=== $name"
    "$@"
    rc=$?
    if [ "$rc" = 0 ]; then
        passed=$((passed + 1))
        echo "=== $name: ok ($((SECONDS - start)) s)"
    elif [ "$rc" = 77 ]; then
        skipped=$((skipped + 1))
        echo "=== $name: SKIPPED ($((SECONDS - start)) s)"
    else
        failed=$((failed + 1))
        failures+=("$name")
        echo "=== $name: FAILED ($((SECONDS - start)) s)"
    fi
}

regress() {
    rm -rf results regression.diffs regression.out output_iso output_iso_slow
    if make -s PG_CONFIG="$PG_CONFIG" installcheck-parallel; then
        return 0
    fi
    cat regression.diffs output_iso/regression.diffs output_iso_slow/*/regression.diffs 2>/dev/null
    return 1
}

# pgTAP in lanes that run at once, each in a database of its own (the tests mostly
# wait for locks, windows and schedules to run out, and none shares a role or a
# queue with another file): pgtap_lanes PREFIX VERSION PG_PROVE_FLAGS FILE...
# makes PREFIX_1..3 (at most one a file) with pgtap and sbqueue VERSION (empty: the default), deals the
# files out by their usual length, longest first, and prints each lane's output
# in turn
pgtap_lanes() {
    local prefix=$1 version=$2 flags=$3 lanes i f w best rc=0
    shift 3
    lanes=$(($# < 3 ? $# : 3))
    local -A secs=([duplicates]=21 [lock_lost]=13 [session]=7 [maintain_stats]=7 [ttl]=6
        [deadletter_table]=6 [defer]=6 [settle_report]=6 [message_size]=4 [scheduled]=3
        [settle_delay]=2 [settle_retry]=2 [maintain_idle_queues]=2)
    local -a load files pids
    for ((i = 1; i <= lanes; i++)); do
        load[i]=0 files[i]=
        psql -X -q -v ON_ERROR_STOP=1 -d postgres -c "DROP DATABASE IF EXISTS ${prefix}_$i" \
            -c "CREATE DATABASE ${prefix}_$i" &&
            psql -X -q -v ON_ERROR_STOP=1 -d "${prefix}_$i" -c "CREATE EXTENSION pgtap" \
                -c "CREATE EXTENSION sbqueue${version:+ VERSION '$version'}" || return 1
    done
    for f in $(for f in "$@"; do
                   w=$(basename "$f" .sql)
                   echo "${secs[$w]:-1} $f"
               done | sort -rn -k1,1 -s | cut -d' ' -f2); do
        w=$(basename "$f" .sql) best=1
        for ((i = 2; i <= lanes; i++)); do
            [ "${load[i]}" -lt "${load[best]}" ] && best=$i
        done
        load[best]=$((load[best] + ${secs[$w]:-1}))
        files[best]+=" $f"
    done
    for ((i = 1; i <= lanes; i++)); do
        [ -n "${files[i]}" ] || continue
        # shellcheck disable=SC2086
        pg_prove -d "${prefix}_$i" $flags ${files[i]} >"$work/${prefix}_$i.out" 2>&1 &
        pids[i]=$!
    done
    # each lane by its pid: "wait -n" would also take the Citus build's end
    for ((i = 1; i <= lanes; i++)); do
        [ -n "${files[i]}" ] || continue
        wait "${pids[i]}" || rc=1
    done
    for ((i = 1; i <= lanes; i++)); do
        [ -n "${files[i]}" ] && { echo "--- lane $i (${prefix}_$i)"; cat "$work/${prefix}_$i.out"; }
    done
    return $rc
}

pgtap() {
    pgtap_lanes sbq_pgtap "" -ovf test/pgtap/*.sql
}

fresh_db() {
    psql -X -q -v ON_ERROR_STOP=1 -d postgres -c "DROP DATABASE IF EXISTS $1" -c "CREATE DATABASE $1" &&
        psql -X -q -v ON_ERROR_STOP=1 -d "$1" -c "CREATE EXTENSION sbqueue"
}

concurrency() {
    fresh_db sbq_conc &&
        timeout 300 "$PYTHON" test/concurrency/concurrency_test.py \
            --host "$PGHOST" --port "$PGPORT" --dbname sbq_conc &&
        fresh_db sbq_conc_sessions &&
        timeout 300 "$PYTHON" test/concurrency/session_drain_test.py \
            --host "$PGHOST" --port "$PGPORT" --dbname sbq_conc_sessions --messages 10000 --consumers 6 &&
        fresh_db sbq_conc_sessions_held &&
        timeout 300 "$PYTHON" test/concurrency/session_drain_test.py \
            --host "$PGHOST" --port "$PGPORT" --dbname sbq_conc_sessions_held --messages 10000 --consumers 6 \
            --hold
}

python_client() {
    fresh_db sbq_py &&
        timeout 120 "$PYTHON" test/clients/python_client_test.py \
            --host "$PGHOST" --port "$PGPORT" --dbname sbq_py &&
        fresh_db sbq_pypkg &&
        PGDATABASE=sbq_pypkg timeout 300 "$PYTHON" -m unittest discover -v \
            -s clients/python/tests 2>&1 &&
        # the package installs with no index (psycopg from Debian) and imports
        "$PYTHON" -m venv --system-site-packages "$work/venv" &&
        "$work/venv/bin/pip" install --quiet --no-index ./clients/python &&
        (cd "$work" && "$work/venv/bin/python" -c \
            'import sbqueue, sys; sys.exit(0 if "site-packages" in sbqueue.__file__ else 1)') &&
        # and its sbq command works
        PGDATABASE=sbq_pypkg "$work/venv/bin/sbq" --json stats >/dev/null
}

# docs/monitoring: the exporter's queries run, count what is there, and the
# sample alerts name only metrics they make
monitoring() {
    psql -X -q -v ON_ERROR_STOP=1 -d postgres -c "DROP DATABASE IF EXISTS sbq_mon" -c "CREATE DATABASE sbq_mon" &&
        PGDATABASE=sbq_mon timeout 120 "$PYTHON" test/monitoring/check_queries.py
}

# every SQL block of README.md and docs/*.md, as written, each in a fresh database
docs_sql() {
    timeout 120 "$PYTHON" test/docs/readme_sql.py
}

c_example() {
    fresh_db sbq_c &&
        PGDATABASE=sbq_c timeout 300 bash examples/c/test.sh
}

node_client() {
    fresh_db sbq_node || return 1
    (
        cd test/clients/node &&
            { [ -d node_modules/pg ] || npm install --no-audit --no-fund --silent; } &&
            PGDATABASE=sbq_node timeout 120 node --test client_test.js
    ) || return 1
    # the Node package's own tests
    fresh_db sbq_nodepkg || return 1
    (
        cd clients/node &&
            { [ -d node_modules/pg ] || npm install --no-audit --no-fund --silent; } &&
            PGDATABASE=sbq_nodepkg timeout 300 node --test test/
    )
}

# the same semantics with locks stored in the message rows (as without the
# preload): pg_regress (its isolation specs pin lease behaviour, so not those)
# and pgTAP, with sbqueue.memory_locks off in every session; and the sessions'
# pgTAP with session locks in the rows too, which the library does with the SQL
# of 0.7 (with the preload and later SQL they live in shared memory whatever
# sbqueue.memory_locks says)
row_locks() {
    PGOPTIONS="-c sbqueue.memory_locks=off" make -s PG_CONFIG="$PG_CONFIG" installcheck ISOLATION= ||
        { cat regression.diffs 2>/dev/null; return 1; }
    PGOPTIONS="-c sbqueue.memory_locks=off" pgtap_lanes sbq_pgtap_rows "" -of test/pgtap/*.sql &&
        PGOPTIONS="-c sbqueue.memory_locks=off" pgtap_lanes sbq_pgtap_rows07 0.7 -of test/pgtap/session.sql
}

upgrade() {
    test/upgrade/upgrade_test.sh
}

# the Debian package built from this tree with dpkg-buildpackage, installed with
# apt-get and tested on a server of its own; META.json for PGXN (test/package).
# It leaves the package installed: the same build the TAP suite then uses
package_suite() {
    timeout 600 bash test/package/package_test.sh
}

# the web console (console/, docs/console.md) driven in headless Chromium;
# run.sh installs chromium and the console's npm packages when they are missing
console() {
    fresh_db sbq_console &&
        PGDATABASE=sbq_console timeout 300 bash console/test/run.sh
}

# in four lanes, each one test at a time, of about the same length (about 260 s
# on two cores, by the times of a CI run): the tests mostly wait (for pg_cron's next minute, for workers to
# come and go, for locks to run out), so four fit on two cores. The ones that time
# their worker or their failover (worker_pool, wakeup, fault_sync_failover) share
# the third lane with tests that use little CPU; a test not named here runs in a
# lane of its own, after the others (name new tests here)
tap() {
    local lanes=(
        worker_hostile,maintain_held_snapshot,bad_input_errors,rights_sessions,plans_by_key,plans_by_queue,topics_fanout_memory,send_groups,send_direct_indexes,lease_crash,citus_log,receive_expired_backlog
        worker_vacuum,worker,fault_no_worker,maintain_pg_cron,metrics_jit,session_probe,session_line,max_queues,maintain_gone_entries,filter_cancel,maintain_restore,session_expired_backlog
        worker_pool,wakeup,fault_sync_failover,fault_backend_kill,fault_harness_checker,fault_zombie_consumer,standby,security_planted,lease_edges,receive_hints,maintain_row_locks,queue_management_deleted
        session_memory,fault_crash_loop,lease_review,topics_crash_loop,lease_lifecycle,fault_consumer_sigkill,lease_share,session_crash,maintain_stats_agree,metrics_counters_move_edges,queue_management_cache,receive_wait_memory
    ) flags="-j4" lane
    for lane in "${lanes[@]}"; do
        flags+=" '--rules=seq=**/{$lane}.pl'"
    done
    make -s PG_CONFIG="$PG_CONFIG" prove_installcheck PROVE_FLAGS="$flags '--rules=seq=**'"
}

# sbqueue on a three-node Citus cluster (docs/scale-out.md); builds Citus from
# the vendored source archive first when it is not installed
citus_suite() {
    if [ -n "$citus_build" ]; then
        wait "$citus_build"
        citus_build=
        cat "$work/citus-build.log"
    fi
    timeout 900 bash test/citus/run.sh
}

layout() {
    "$PYTHON" scripts/check_source.py
}

# the filter language's engine alone (test/filter): its unit tests and a fuzz run
# of SBQ_FUZZ_SECONDS (15 by default), under AddressSanitizer and UndefinedBehaviorSanitizer
filter_engine() {
    make -s -C test/filter clean check fuzz FUZZ_SECONDS="${SBQ_FUZZ_SECONDS:-15}"
}

suite "source layout" layout
suite "filter engine (unit tests, fuzz)" filter_engine
suite "pg_regress and isolation" regress
suite "pg_regress and pgTAP, locks in rows" row_locks
suite "upgrade" upgrade
suite "pgTAP" pgtap
suite "concurrency" concurrency
suite "python client" python_client
suite "node client" node_client
suite "c example" c_example
suite "monitoring queries" monitoring
suite "docs SQL" docs_sql
suite "web console" console
suite "package (Debian, PGXN)" package_suite
suite "TAP (worker, wake-ups, faults)" tap
suite "Citus cluster (scale-out)" citus_suite

echo
[ "$skipped" -gt 0 ] && skipped_text=", $skipped skipped (see SKIPPED above)" || skipped_text=
echo "suites: $passed passed, $failed failed$skipped_text"
if [ "$failed" -gt 0 ]; then
    echo "failed: ${failures[*]}"
    exit 1
fi
exit 0
