#!/usr/bin/env bash
# test/upgrade/upgrade_test.sh: install every released version of sbqueue,
# upgrade it step by step to the current one, and check after each step that
# messages sent before the upgrade are still there; at the end the upgraded
# extension must match a fresh install object by object.
#
# Between installing a new build and running ALTER EXTENSION UPDATE, the new
# library runs with the SQL of the old version: so at each old version, before
# its update, the current library must still send, receive under a lock and
# complete, run sbq_maintain() and show sbq_queue_stats (where that version
# has them), and a lock taken before the update must still settle after it.
# Needs PGHOST/PGPORT/PGUSER of a running server with sbqueue installed;
# scripts/test.sh runs it with sbqueue preloaded, as in production.
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
# run one SQL command in database $1: its output (unaligned), or the first
# line of its error as "error: ..." (so a failing call is a failed check, not
# the end of the test)
try() {
    local out
    if out=$(psql -At -d "$1" -c "$2" 2>&1); then
        printf '%s' "$out"
    else
        printf 'error: %s' "$(printf '%s\n' "$out" | grep -m1 -E 'ERROR|FATAL|error' | sed 's/^.*\(ERROR\|FATAL\): *//')"
    fi
}
# whether the extension in database $1 has the function (regprocedure text) $2
has_function() {
    [ "$(psql -At -d "$1" -c "SELECT to_regprocedure('$2') IS NOT NULL")" = t ]
}
# whether the extension in database $1 has the relation $2
has_relation() {
    [ "$(psql -At -d "$1" -c "SELECT to_regclass('$2') IS NOT NULL")" = t ]
}
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

# old_sql_checks VERSION: the current library with the SQL of VERSION, which
# is installed in sbq_upgrade_old (and not updated yet), on a queue of its own.
# Leaves in $held_token the token of a message received under VERSION and not
# settled, for after the update (empty when that receive failed).
held_token=
old_sql_checks() {
    local v=$1 db=sbq_upgrade_old q="lib-$1" got tok s1 s2
    got=$(try $db "SELECT count(*) FROM sbq_create_queue('$q')")
    check "$v: sbq_create_queue works with the current library" "$got" 1
    s1=$(try $db "SELECT sbq_send('$q', 'one under $v')")
    s2=$(try $db "SELECT sbq_send('$q', 'two under $v')")
    got="$s1, $s2"
    if [[ $s1 =~ ^[0-9]+$ && $s2 =~ ^[0-9]+$ ]] && [ "$s2" -gt "$s1" ]; then
        got="two increasing sequence numbers"
    fi
    check "$v: sbq_send works with the current library" "$got" "two increasing sequence numbers"

    # a peek-lock receive, then the complete of its token
    got=$(try $db "SELECT lock_token || ' ' || convert_from(body, 'UTF8') FROM sbq_receive('$q')")
    tok=
    if [[ $got =~ ^[0-9a-f-]{36}\ (.*)$ ]]; then
        tok=${got%% *}
        got=${BASH_REMATCH[1]}
    fi
    check "$v: a peek-lock sbq_receive returns the first message with a lock token" "$got" "one under $v"
    if has_relation $db sbq_queue_stats; then
        got=$(try $db "SELECT active_count + locked_count FROM sbq_queue_stats WHERE queue = '$q'")
        check "$v: sbq_queue_stats shows the queue's two messages" "$got" 2
        got=$(try $db "SELECT active_count || ' active, ' || locked_count || ' locked'
                         FROM sbq_queue_stats WHERE queue = '$q'")
        check "$v: sbq_queue_stats counts the received message as locked" "$got" "1 active, 1 locked"
    fi
    if [ -n "$tok" ]; then
        got=$(try $db "SELECT 'completed' FROM sbq_complete('$q', '$tok'::uuid)")
    else
        got="no lock token to complete"
    fi
    check "$v: sbq_complete of that token succeeds" "$got" completed
    got=$(try $db "SELECT count(*) || ' ' || string_agg(convert_from(body, 'UTF8'), ',') FROM sbq_peek('$q', 10)")
    check "$v: the completed message is gone, the other is still queued" "$got" "1 two under $v"

    if has_function $db 'sbq_maintain()'; then
        got=$(try $db "SELECT sbq_maintain() ->> 'skipped'")
        check "$v: sbq_maintain() runs" "$got" false
    fi

    # a lock taken before the update, settled after it
    got=$(try $db "SELECT lock_token || ' ' || convert_from(body, 'UTF8') FROM sbq_receive('$q')")
    held_token=
    if [[ $got =~ ^[0-9a-f-]{36}\ (.*)$ ]]; then
        held_token=${got%% *}
        got=${BASH_REMATCH[1]}
    fi
    check "$v: a message received before the update, its lock token kept" "$got" "two under $v"
}

step=$oldest
while [ "$step" != "$current" ]; do
    next=$(cd "$root/sql" && ls "sbqueue--$step--"*.sql 2>/dev/null | sed "s/sbqueue--$step--\(.*\)\.sql/\1/" | sort -V | tail -1)
    if [ -z "$next" ]; then
        echo "not ok - no upgrade script from $step"
        exit 1
    fi
    old_sql_checks "$step"
    psql -d sbq_upgrade_old -c "ALTER EXTENSION sbqueue UPDATE TO '$next'"
    got=$(psql -At -d sbq_upgrade_old -c "SELECT extversion FROM pg_extension WHERE extname = 'sbqueue'")
    check "upgraded from $step to $next" "$got" "$next"
    got=$(psql -At -d sbq_upgrade_old -c "SELECT count(*) FROM sbq_peek('kept', 10)")
    check "the message sent under $oldest is still queued at $next" "$got" "1"
    if [ -n "$held_token" ]; then
        got=$(try sbq_upgrade_old "SELECT 'completed' FROM sbq_complete('lib-$step', '$held_token'::uuid)")
    else
        got="no lock token from $step"
    fi
    check "a lock taken under $step completes after the update to $next" "$got" completed
    got=$(try sbq_upgrade_old "SELECT count(*) FROM sbq_peek('lib-$step', 10)")
    check "nothing is left in the queue used under $step at $next" "$got" 0
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
