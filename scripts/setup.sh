#!/usr/bin/env bash
# scripts/setup.sh: install the Debian packages sbqueue needs to build and test,
# then build and install the extension. Idempotent; needs root for apt-get and
# for installing into PostgreSQL's directories.
set -euo pipefail
cd "$(dirname "$0")/.."

PG_MAJOR=${PG_MAJOR:-15}
packages=(
    make gcc
    "postgresql-$PG_MAJOR" "postgresql-server-dev-$PG_MAJOR" "postgresql-$PG_MAJOR-pgtap"
    "postgresql-$PG_MAJOR-cron"
    libtap-parser-sourcehandler-pgtap-perl libipc-run-perl
    python3 python3-psycopg python3-pip python3-venv python3-yaml gdb
)
missing=()
for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
command -v node >/dev/null && command -v npm >/dev/null || missing+=(nodejs npm)

if [ ${#missing[@]} -gt 0 ]; then
    echo "setup: installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

export PG_CONFIG=${PG_CONFIG:-/usr/lib/postgresql/$PG_MAJOR/bin/pg_config}
make -s PG_CONFIG="$PG_CONFIG"
make -s PG_CONFIG="$PG_CONFIG" install >/dev/null
echo "setup: sbqueue built and installed into $("$PG_CONFIG" --pkglibdir)"
