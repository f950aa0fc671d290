#!/usr/bin/env bash
# scripts/pgserver.sh: start or stop a throwaway PostgreSQL server for sbqueue.
#
#   scripts/pgserver.sh start DIR [PORT] [--preload]   prints the port it listens on
#   scripts/pgserver.sh stop DIR
#
# The server runs as the postgres user (initdb and postgres refuse root), listens
# only on a Unix socket in DIR and on 127.0.0.1, and trusts local connections:
# it is for tests and demos, never for data that matters.
set -euo pipefail

PGBIN=${PGBIN:-$("${PG_CONFIG:-pg_config}" --bindir)}
RUN_AS=()
if [ "$(id -u)" = 0 ]; then RUN_AS=(runuser -u postgres --); fi

free_port() {
    local p
    for p in $(seq "${1:-54330}" 65000); do
        if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
            echo "$p"
            return 0
        fi
    done
    return 1
}

cmd=${1:?usage: pgserver.sh start|stop DIR [PORT] [--preload]}
dir=${2:?usage: pgserver.sh start|stop DIR [PORT] [--preload]}

case "$cmd" in
start)
    port=${3:-}
    preload=${4:-}
    if [ "$port" = "--preload" ]; then preload=--preload; port=; fi
    # already running (a demo started earlier): reuse it
    if [ -f "$dir/port" ] && "${RUN_AS[@]}" "$PGBIN/pg_ctl" -D "$dir/data" status >/dev/null 2>&1; then
        cat "$dir/port"
        exit 0
    fi
    picked=
    [ -n "$port" ] || { port=$(free_port); picked=1; }
    mkdir -p "$dir"
    if [ "$(id -u)" = 0 ]; then chown postgres: "$dir"; fi
    if [ ! -f "$dir/data/PG_VERSION" ]; then
        "${RUN_AS[@]}" "$PGBIN/initdb" -D "$dir/data" -U postgres -A trust -E UTF8 \
            --locale=C.UTF-8 >"$dir/initdb.log" 2>&1 ||
            { cat "$dir/initdb.log" >&2; exit 1; }
        {
            echo "listen_addresses = '127.0.0.1'"
            echo "unix_socket_directories = '$dir'"
            echo "max_connections = 100"
            echo "fsync = on"
            echo "log_min_messages = warning"
            if [ "$preload" = "--preload" ]; then
                echo "shared_preload_libraries = 'sbqueue'"
            fi
        } >>"$dir/data/postgresql.conf"
    fi
    tries=0
    until "${RUN_AS[@]}" "$PGBIN/pg_ctl" -D "$dir/data" -o "-p $port" -l "$dir/server.log" -w start \
        >/dev/null; do
        # a port found free may be taken before the server binds it (by another
        # server, or as the local port of a connection): then the next free one
        if [ -n "$picked" ] && [ $((tries += 1)) -lt 5 ] &&
            grep -q 'could not create any TCP/IP sockets' <(tail -n 5 "$dir/server.log"); then
            port=$(free_port $((port + 1)))
            continue
        fi
        tail -20 "$dir/server.log" >&2
        exit 1
    done
    echo "$port" >"$dir/port"
    echo "$port"
    ;;
stop)
    if [ -f "$dir/data/postmaster.pid" ]; then
        "${RUN_AS[@]}" "$PGBIN/pg_ctl" -D "$dir/data" -m fast -w stop >/dev/null || true
    fi
    ;;
*)
    echo "usage: pgserver.sh start|stop DIR [PORT] [--preload]" >&2
    exit 2
    ;;
esac
