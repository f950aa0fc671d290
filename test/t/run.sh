#!/usr/bin/env bash
# test/t/run.sh: run sbqueue's TAP tests (test/t/*.pl) with prove and
# PostgreSQL::Test::Cluster, from any working directory.
#
#   test/t/run.sh [prove options] [test files]     default: every test/t/*.pl
#   make prove_installcheck [PROVE_FLAGS=...] [PROVE_TESTS=...]   the same
#
# Needs only installed packages: postgresql-15 and postgresql-server-dev-15
# (PostgreSQL::Test::*, pg_regress), libipc-run-perl, and sbqueue itself built
# and installed (make install); postgresql-15-cron for maintain_pg_cron.pl, which
# is skipped without it. initdb refuses to run as root, so as root the tests
# run as the postgres user. Each test starts its own servers on free ports in
# a scratch directory, removed afterwards unless a test failed (then its logs
# are printed). Exits non-zero when a test fails. SBQ_KEEP_TAP=1 keeps the
# scratch directory (its path is in the output) for a look at the logs.
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
PG_CONFIG=${PG_CONFIG:-/usr/lib/postgresql/${PG_MAJOR:-15}/bin/pg_config}
bindir=$("$PG_CONFIG" --bindir) || exit 1
pgxs=$("$PG_CONFIG" --pgxs) || exit 1
pgxsdir=${pgxs%/src/makefiles/pgxs.mk}
perllib=$pgxsdir/src/test/perl
pg_regress=$pgxsdir/src/test/regress/pg_regress
pkglibdir=$("$PG_CONFIG" --pkglibdir)

for f in "$perllib/PostgreSQL/Test/Cluster.pm" "$pg_regress"; do
    [ -e "$f" ] || { echo "run.sh: $f is missing (install postgresql-server-dev-${PG_MAJOR:-15})" >&2; exit 1; }
done
perl -MIPC::Run -e 1 2>/dev/null || { echo "run.sh: IPC::Run is missing (install libipc-run-perl)" >&2; exit 1; }
[ -f "$pkglibdir/sbqueue.so" ] || { echo "run.sh: sbqueue is not installed (make install)" >&2; exit 1; }

if [ $# -eq 0 ]; then
    set -- "$here"/*.pl
fi
# the tests run from a scratch directory: make file arguments absolute
args=()
for a in "$@"; do
    if [ -f "$a" ]; then a=$(cd "$(dirname "$a")" && pwd)/$(basename "$a"); fi
    args+=("$a")
done
set -- "${args[@]}"

work=$(mktemp -d /tmp/sbqueue-tap.XXXXXX)
chmod 755 "$work"
run_as=()
if [ "$(id -u)" = 0 ]; then
    chown postgres: "$work"
    run_as=(runuser -u postgres --)
fi

# the tests' own servers only: nothing from the caller's environment. The timeout
# is PostgreSQL's own default, 180 s: it bounds each poll, and a background psql's
# whole life unless the test restarts its timer per query
cd "$work" || exit 1
"${run_as[@]}" env -u PGHOST -u PGPORT -u PGUSER -u PGDATABASE -u PGDATA \
    PATH="$bindir:$PATH" PERL5LIB="$perllib${PERL5LIB:+:$PERL5LIB}" \
    PG_REGRESS="$pg_regress" TESTDIR="$work" PG_TEST_TIMEOUT_DEFAULT="${PG_TEST_TIMEOUT_DEFAULT:-180}" \
    prove --timer "$@" 2>&1 | tee "$work/prove.out"
rc=${PIPESTATUS[0]}

# on failure: the logs of the failed tests only, then what failed, last, so
# that it is the end of the output that says it
if [ $rc -ne 0 ]; then
    failed=$(sed -n 's|^.*/\([a-z][a-z_0-9]*\)\.pl .*Failed: [1-9].*|\1|p; s|^.*/\([a-z][a-z_0-9]*\)\.pl .*Wstat: [1-9].*|\1|p' \
        "$work/prove.out" | sort -u)
    for t in $failed; do
        for f in "$work"/tmp_check/log/regress_log_"$t" "$work"/tmp_check/log/"$t"_*.log; do
            [ -f "$f" ] || continue
            echo "=== $f"
            tail -n 150 "$f"
        done
    done
    echo "=== failed TAP tests: ${failed:-(see above)}"
    grep -h -A6 '^\[[^]]*\]([^)]*) not ok' "$work"/tmp_check/log/regress_log_* 2>/dev/null | tail -n 80
    sed -n '/^Test Summary Report/,$p' "$work/prove.out"
fi
cd / && { [ -n "${SBQ_KEEP_TAP:-}" ] || rm -rf "$work"; }
exit $rc
