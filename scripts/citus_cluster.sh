#!/usr/bin/env bash
# scripts/citus_cluster.sh: a throwaway Citus cluster on this machine, for the
# scale-out tests and experiments (docs/scale-out.md).
#
#   scripts/citus_cluster.sh build TARBALL     build and install Citus from its source
#                                              archive (skipped when citus.so is there)
#   scripts/citus_cluster.sh start DIR [DB]    a coordinator and two workers, each a
#                                              server of scripts/pgserver.sh under DIR
#                                              (coord, w1, w2) with citus and sbqueue
#                                              preloaded; database DB (default app)
#                                              on each, with citus, the workers added;
#                                              prints the three ports
#   scripts/citus_cluster.sh stop DIR
#
# Every node trusts local connections: for tests, never for data that matters.
set -euo pipefail
cd "$(dirname "$0")/.."
PG_CONFIG=${PG_CONFIG:-pg_config}
PGBIN=${PGBIN:-$("$PG_CONFIG" --bindir)}
export PGBIN PG_CONFIG
RUN_AS=()
if [ "$(id -u)" = 0 ]; then RUN_AS=(runuser -u postgres --); fi

usage() {
    echo "usage: citus_cluster.sh build TARBALL | start DIR [DB] | stop DIR" >&2
    exit 2
}

cmd=${1:-}
case "$cmd" in
build)
    tarball=${2:-}
    [ -n "$tarball" ] || usage
    if [ -f "$("$PG_CONFIG" --pkglibdir)/citus.so" ]; then
        echo "citus_cluster: Citus is installed already" >&2
        exit 0
    fi
    [ -f "$tarball" ] || { echo "citus_cluster: no Citus source at $tarball" >&2; exit 1; }
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        # another apt-get of the test suite may hold the lock: wait for it
        DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends \
            liblz4-dev libzstd-dev libkrb5-dev >/dev/null
    fi
    work=$(mktemp -d /tmp/sbqueue-citus-build.XXXXXX)
    trap 'rm -rf "$work"' EXIT
    tar xzf "$tarball" -C "$work"
    src=$(find "$work" -maxdepth 1 -mindepth 1 -type d | head -1)
    (cd "$src" && ./configure PG_CONFIG="$PG_CONFIG" --without-libcurl >"$work/configure.log" 2>&1 &&
        make -j2 COPT="-O0 -g0" >"$work/make.log" 2>&1 && make install PG_CONFIG="$PG_CONFIG" >"$work/install.log" 2>&1) || {
        tail -30 "$work"/*.log >&2
        echo "citus_cluster: the Citus build failed" >&2
        exit 1
    }
    ;;
start)
    dir=${2:-}
    db=${3:-app}
    [ -n "$dir" ] || usage
    mkdir -p "$dir"
    ports=()
    for node in coord w1 w2; do
        if [ ! -f "$dir/$node/data/PG_VERSION" ]; then
            # initialise only, then add the cluster's settings before the first start
            port=$(scripts/pgserver.sh start "$dir/$node")
            scripts/pgserver.sh stop "$dir/$node"
            cat >>"$dir/$node/data/postgresql.conf" <<EOF
shared_preload_libraries = 'citus,sbqueue'
max_prepared_transactions = 100
max_worker_processes = 20
wal_level = logical
max_connections = 200
citus.shard_count = 8
citus.log_remote_commands = off
EOF
            # a non-blocking shard split decodes with Citus's own output plugin,
            # which servers that have an allow-list of them must list
            if "$PGBIN/postgres" --describe-config 2>/dev/null | grep '^output_plugin_libraries' >/dev/null; then
                echo "output_plugin_libraries = 'pgoutput, test_decoding, citus'" >>"$dir/$node/data/postgresql.conf"
            fi
        fi
        ports+=("$(scripts/pgserver.sh start "$dir/$node")")
    done
    for i in 0 1 2; do
        "$PGBIN/psql" -X -q -h 127.0.0.1 -p "${ports[$i]}" -U postgres -d postgres -v ON_ERROR_STOP=1 \
            -c "SELECT 1 FROM pg_database WHERE datname = '$db'" -At | grep -q 1 ||
            "$PGBIN/psql" -X -q -h 127.0.0.1 -p "${ports[$i]}" -U postgres -d postgres -v ON_ERROR_STOP=1 \
                -c "CREATE DATABASE $db"
        "$PGBIN/psql" -X -q -h 127.0.0.1 -p "${ports[$i]}" -U postgres -d "$db" -v ON_ERROR_STOP=1 \
            -c "CREATE EXTENSION IF NOT EXISTS citus" >/dev/null
    done
    "$PGBIN/psql" -X -q -h 127.0.0.1 -p "${ports[0]}" -U postgres -d "$db" -v ON_ERROR_STOP=1 -At >/dev/null <<EOF
SELECT citus_set_coordinator_host('127.0.0.1', ${ports[0]});
SELECT citus_add_node('127.0.0.1', ${ports[1]}) WHERE NOT EXISTS
    (SELECT FROM pg_dist_node WHERE nodeport = ${ports[1]});
SELECT citus_add_node('127.0.0.1', ${ports[2]}) WHERE NOT EXISTS
    (SELECT FROM pg_dist_node WHERE nodeport = ${ports[2]});
EOF
    echo "${ports[*]}" >"$dir/ports"
    echo "${ports[*]}"
    ;;
stop)
    dir=${2:-}
    [ -n "$dir" ] || usage
    for node in coord w1 w2; do
        scripts/pgserver.sh stop "$dir/$node" || true
    done
    ;;
*)
    usage
    ;;
esac
