#!/usr/bin/env bash
# bench/no_preload.sh: the full cycle without shared_preload_libraries (locks and
# counters in the rows), this tree's library against an earlier commit's and
# against the plain-SQL SKIP LOCKED queue, in one server.
#
#   bench/no_preload.sh REV [SECONDS] [ROUNDS]     defaults: 10 s cells, 3 rounds
#
# Builds REV's library (a git revision with the same SQL version as this tree)
# and this tree's; installs this tree (scripts/setup.sh) and starts one
# throwaway server without the preload (fsync and synchronous_commit on,
# shared_buffers 1GB). Without the preload a backend loads the library when it
# first calls it, so the libraries take turns by being copied over the
# installed one between cells, each cell with new connections. The cells:
# bench/skq_cycle.sql (plain), bench/sbq_cycle.sql with REV's library (old) and
# with this tree's (new), 4 clients, pgbench -M prepared -r; in each round in
# the order plain old new, then new old plain. Prints the median cycles/second
# of each and the median latency of each statement (milliseconds, as pgbench
# -r reports them under the 4 clients), as Markdown. This tree's library is
# installed again at the end. NP_SYNCHRONOUS_COMMIT=off measures the CPU a call
# costs without each commit's wait for its WAL flush; NP_CLIENTS (4) sets the
# clients.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
rev=${1:?usage: bench/no_preload.sh REV [SECONDS] [ROUNDS]}
secs=${2:-10}
rounds=${3:-3}
clients=${NP_CLIENTS:-4}

scripts/setup.sh >/dev/null
PG_CONFIG=${PG_CONFIG:-/usr/lib/postgresql/${PG_MAJOR:-15}/bin/pg_config}
bin=$("$PG_CONFIG" --bindir)
lib=$("$PG_CONFIG" --pkglibdir)/sbqueue.so
work=$(mktemp -d /tmp/sbqueue-np.XXXXXX)
chmod 755 "$work"
# put a library in place by a rename: a backend that still has the old file
# mapped (one that is exiting) keeps it, where a copy over it in place
# could crash it and the server with it
put_lib() { cp "$1" "$lib.bench-tmp" && mv -f "$lib.bench-tmp" "$lib"; }
cleanup() {
    scripts/pgserver.sh stop "$work/pg" >/dev/null 2>&1 || true
    [ -f "$work/new.so" ] && put_lib "$work/new.so"
    git -C "$root" worktree remove --force "$work/src" >/dev/null 2>&1 || true
    rm -rf "$work"
}
trap cleanup EXIT

git -C "$root" worktree add --detach "$work/src" "$rev" >/dev/null 2>&1
version() { sed -n "s/^default_version = '\(.*\)'/\1/p" "$1/sbqueue.control"; }
[ "$(version "$work/src")" = "$(version "$root")" ] ||
    { echo "no_preload: $rev has SQL $(version "$work/src"), this tree $(version "$root")" >&2; exit 1; }
make -s -C "$work/src" PG_CONFIG="$PG_CONFIG" >/dev/null
cp "$work/src/sbqueue.so" "$work/old.so"
cp "$lib" "$work/new.so"

port=$(PGBIN=$bin scripts/pgserver.sh start "$work/pg")
export PGHOST="$work/pg" PGPORT=$port PGUSER=postgres PGDATABASE=postgres
psql -X -q -v ON_ERROR_STOP=1 -c "ALTER SYSTEM SET shared_buffers = '1GB'" \
    -c "ALTER SYSTEM SET max_wal_size = '8GB'" \
    -c "ALTER SYSTEM SET synchronous_commit = '${NP_SYNCHRONOUS_COMMIT:-on}'" >/dev/null
scripts/pgserver.sh stop "$work/pg" >/dev/null
port=$(PGBIN=$bin scripts/pgserver.sh start "$work/pg")
export PGPORT=$port
psql -X -q -v ON_ERROR_STOP=1 -c "CREATE EXTENSION sbqueue" -c "SELECT sbq_create_queue('bench')" \
    -f bench/baseline_skip_locked.sql >/dev/null

# one cell: contender $1 (plain, old, new); appends "cycles/s lat1 lat2 lat3" to $work/$1
cell() {
    local c=$1 script=sbq_cycle out
    case $c in
    plain) script=skq_cycle ;;
    *) put_lib "$work/$c.so" ;;
    esac
    psql -X -q -c "SELECT sbq_purge_queue('bench')" -c "TRUNCATE skq_messages" \
        -c "VACUUM ANALYZE sbq.messages, skq_messages" >/dev/null
    out=$("$bin/pgbench" -n -M prepared -r -c "$clients" -j "$((clients < 2 ? clients : 2))" -T "$secs" -f "bench/$script.sql" 2>&1)
    {
        sed -n 's/^tps = \([0-9.]*\) .*/\1/p' <<<"$out"
        # the three statements' latencies, in their order in the script
        awk '/statement latencies/ { on = 1; next } on && NF > 2 && $3 !~ /^\\/ { print $1 }' <<<"$out" |
            head -n 3
    } | paste -sd ' ' >>"$work/$c"
}

for ((r = 1; r <= rounds; r++)); do
    for c in plain old new new old plain; do cell "$c"; done
done

# the median of column $2 of file $1
median() { awk -v k="$2" '{ print $k }' "$1" | sort -g | awk '{ v[NR] = $1 } END {
    printf "%s", (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

echo "bench/no_preload.sh $rev $secs $rounds: the median of $((rounds * 2)) cells of ${secs} s each, $clients clients," \
    "synchronous_commit ${NP_SYNCHRONOUS_COMMIT:-on}"
echo "(old: $(git -C "$root" log -1 --format='%h' "$rev"); new: this tree)"
echo
echo "| contender | cycles/s | / plain | send or INSERT (ms) | receive or UPDATE (ms) | complete or DELETE (ms) |"
echo "|---|---:|---:|---:|---:|---:|"
plain=$(median "$work/plain" 1)
for c in plain old new; do
    m=$(median "$work/$c" 1)
    printf '| %s | %.0f | %s | %s | %s | %s |\n' "$c" "$m" \
        "$(awk -v a="$m" -v b="$plain" 'BEGIN { printf "%.2fx", a / b }')" \
        "$(median "$work/$c" 2)" "$(median "$work/$c" 3)" "$(median "$work/$c" 4)"
done
