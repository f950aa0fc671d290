#!/usr/bin/env bash
# scripts/demo.sh: set everything up and show sbqueue at work. Installs what is
# missing, builds and installs the extension, starts a throwaway PostgreSQL
# server with sbqueue preloaded on a free local port, and runs examples/demo.sql
# in a fresh database. The server stays up afterwards for you to try things.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/setup.sh
dir=${SBQ_DEMO_DIR:-/tmp/sbqueue-demo}
port=$(scripts/pgserver.sh start "$dir" --preload)
export PGHOST="$dir" PGPORT="$port" PGUSER=postgres

psql -X -q -v ON_ERROR_STOP=1 -d postgres \
    -c "DROP DATABASE IF EXISTS sbqueue_demo" -c "CREATE DATABASE sbqueue_demo"
psql -X -q -v ON_ERROR_STOP=1 -d sbqueue_demo \
    -c "CREATE SCHEMA sbqueue" -c "CREATE EXTENSION sbqueue SCHEMA sbqueue"
echo
psql -X -v ON_ERROR_STOP=1 -d sbqueue_demo -f examples/demo.sql 2>&1 | sed 's/^psql:[^ ]* NOTICE:  /NOTICE: /'

cat <<TXT

The server is still running, with sbqueue preloaded (port $port). Connect with
    psql -h $dir -p $port -U postgres sbqueue_demo
and stop it with
    scripts/pgserver.sh stop $dir
TXT
