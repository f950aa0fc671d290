#!/usr/bin/env bash
# test/upgrade/upgrade_test.sh: install every released version of sbqueue,
# upgrade it step by step to the current one, and check after each step that
# messages sent before the upgrade are still there; at the end the upgraded
# extension must match a fresh install object by object.
# Needs PGHOST/PGPORT/PGUSER of a running server with sbqueue installed.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

current=$(sed -n "s/^default_version *= *'\(.*\)'/\1/p" "$root/sbqueue.control")
# the versions with a full install script, oldest first
mapfile -t versions < <(cd "$root/sql" && ls sbqueue--*.sql | grep -v -- '--.*--' |
    sed 's/sbqueue--\(.*\)\.sql/\1/' | sort -V)
oldest=${versions[0]}

psql() { command psql -X -q -v ON_ERROR_STOP=1 "$@"; }
checks=0
failures=0
check() {
    checks=$((checks + 1))
    if [ "$2" = "$3" ]; then
        echo "ok $checks - $1"
    else
        failures=$((failures + 1))
        echo "not ok $checks - $1: expected '$3', got '$2'"
    fi
}

psql -d postgres -c "SET client_min_messages = warning" -c "DROP DATABASE IF EXISTS sbq_upgrade_old" -c "DROP DATABASE IF EXISTS sbq_upgrade_new" \
    -c "CREATE DATABASE sbq_upgrade_old" -c "CREATE DATABASE sbq_upgrade_new"
psql -d sbq_upgrade_new -c "CREATE EXTENSION sbqueue"
psql -d sbq_upgrade_old -c "CREATE EXTENSION sbqueue VERSION '$oldest'"
psql -d sbq_upgrade_old -c "SELECT sbq_create_queue('kept')" \
    -c "SELECT sbq_send('kept', 'sent under $oldest')" >/dev/null
echo "installed $oldest; upgrading to $current"

step=$oldest
while [ "$step" != "$current" ]; do
    next=$(cd "$root/sql" && ls "sbqueue--$step--"*.sql 2>/dev/null | sed "s/sbqueue--$step--\(.*\)\.sql/\1/" | sort -V | tail -1)
    if [ -z "$next" ]; then
        echo "not ok - no upgrade script from $step"
        exit 1
    fi
    psql -d sbq_upgrade_old -c "ALTER EXTENSION sbqueue UPDATE TO '$next'"
    got=$(psql -At -d sbq_upgrade_old -c "SELECT extversion FROM pg_extension WHERE extname = 'sbqueue'")
    check "upgraded from $step to $next" "$got" "$next"
    got=$(psql -At -d sbq_upgrade_old -c "SELECT count(*) FROM sbq_peek('kept', 10)")
    check "the message sent under $oldest is still queued at $next" "$got" "1"
    step=$next
done

psql -d sbq_upgrade_new -f "$here/describe.sql" >"$work/fresh.txt"
psql -d sbq_upgrade_old -f "$here/describe.sql" >"$work/upgraded.txt"
if diff -u "$work/fresh.txt" "$work/upgraded.txt" >"$work/diff.txt"; then
    check "the upgraded extension matches a fresh install ($(wc -l <"$work/fresh.txt") lines of definitions)" same same
else
    cat "$work/diff.txt"
    check "the upgraded extension matches a fresh install" different same
fi

got=$(psql -At -d sbq_upgrade_old -c "SELECT convert_from(body, 'UTF8') FROM sbq_receive('kept', 5, receive_mode => 'receive_and_delete')")
check "the upgraded extension receives the old message" "$got" "sent under $oldest"
got=$(psql -At -d sbq_upgrade_old -c "SELECT (sbq_maintain() ->> 'skipped')")
check "functions added by the upgrade work" "$got" "false"

psql -d postgres -c "DROP DATABASE sbq_upgrade_old" -c "DROP DATABASE sbq_upgrade_new"
echo "$((checks - failures)) passed, $failures failed"
[ "$failures" -eq 0 ]
