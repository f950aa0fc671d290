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
    rm -rf results regression.diffs regression.out output_iso
    if make -s PG_CONFIG="$PG_CONFIG" installcheck; then
        return 0
    fi
    cat regression.diffs output_iso/regression.diffs 2>/dev/null
    return 1
}

pgtap() {
    psql -X -q -v ON_ERROR_STOP=1 -d postgres -c "CREATE DATABASE sbq_pgtap" &&
        psql -X -q -v ON_ERROR_STOP=1 -d sbq_pgtap \
            -c "CREATE EXTENSION pgtap" -c "CREATE EXTENSION sbqueue" &&
        pg_prove -d sbq_pgtap -ovf test/pgtap/*.sql
}

fresh_db() {
    psql -X -q -v ON_ERROR_STOP=1 -d postgres -c "DROP DATABASE IF EXISTS $1" -c "CREATE DATABASE $1" &&
        psql -X -q -v ON_ERROR_STOP=1 -d "$1" -c "CREATE EXTENSION sbqueue"
}

concurrency() {
    fresh_db sbq_conc &&
        timeout 300 "$PYTHON" test/concurrency/concurrency_test.py \
            --host "$PGHOST" --port "$PGPORT" --dbname sbq_conc
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
    psql -X -q -v ON_ERROR_STOP=1 -d postgres -c "DROP DATABASE IF EXISTS sbq_pgtap_rows" \
        -c "CREATE DATABASE sbq_pgtap_rows" -c "DROP DATABASE IF EXISTS sbq_pgtap_rows07" \
        -c "CREATE DATABASE sbq_pgtap_rows07" &&
        psql -X -q -v ON_ERROR_STOP=1 -d sbq_pgtap_rows \
            -c "CREATE EXTENSION pgtap" -c "CREATE EXTENSION sbqueue" &&
        psql -X -q -v ON_ERROR_STOP=1 -d sbq_pgtap_rows07 \
            -c "CREATE EXTENSION pgtap" -c "CREATE EXTENSION sbqueue VERSION '0.7'" &&
        PGOPTIONS="-c sbqueue.memory_locks=off" pg_prove -d sbq_pgtap_rows -of test/pgtap/*.sql &&
        PGOPTIONS="-c sbqueue.memory_locks=off" pg_prove -d sbq_pgtap_rows07 -of test/pgtap/session.sql
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

# in three lanes, each one test at a time: the tests mostly wait (for pg_cron's
# next minute, for workers to come and go, for locks to run out), so three fit on
# two cores; the ones that time their worker (worker_pool, wakeup) share a lane
# with tests that use little CPU
tap() {
    make -s PG_CONFIG="$PG_CONFIG" prove_installcheck \
        PROVE_FLAGS="-j3 '--rules=seq=**/{maintain_pg_cron,topics_crash_loop,worker_hostile}.pl' \
'--rules=seq=**/{worker_vacuum,fault_no_worker,lease_review,session_memory}.pl' '--rules=seq=**'"
}

# sbqueue on a three-node Citus cluster (docs/scale-out.md); builds Citus from
# the vendored source archive first when it is not installed
citus_suite() {
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
