#!/usr/bin/env bash
# bench/expired_backlog.sh: a receive of one message behind a backlog of
# messages whose time to live has passed, with maintenance not running (the
# receive takes them off the queue on its way), by the depth of the backlog.
#
#   bench/expired_backlog.sh [DEPTHS] [ROUNDS]     defaults: "2500 5000 10000 20000", 3
#
# Measures the sbqueue installed for $PG_CONFIG (it builds nothing: run `make
# install` first, or point PG_CONFIG at a copy of PostgreSQL's installation
# that holds another build). One throwaway server (scripts/pgserver.sh
# --preload, the maintenance worker off). For each depth, each round and each
# receive, a queue of its own gets DEPTH messages that expire a second later
# and one that does not; a second later one transaction runs the receive of
# one message and reads how many index entries of sbqueue's tables it read
# (pg_stat_get_xact_tuples_returned). The receives:
#   rows     peek-lock with sbqueue.memory_locks off (locks in the rows)
#   delete   receive-and-delete
#   memory   peek-lock with the locks in shared memory
#   session  a session receive (session locks in shared memory): the backlog
#            and the message behind it are one session's, accepted in the
#            same transaction
# Prints, per receive and depth, the median of the call's milliseconds, the
# index entries read, and in how many rounds it returned the message behind
# the backlog, as a Markdown table.
set -euo pipefail
cd "$(dirname "$0")/.."
depths=${1:-2500 5000 10000 20000}
rounds=${2:-3}

PG_CONFIG=${PG_CONFIG:-/usr/lib/postgresql/${PG_MAJOR:-15}/bin/pg_config}
export PGBIN=${PGBIN:-$("$PG_CONFIG" --bindir)}
export PATH="$PGBIN:$PATH"
export PGUSER=postgres PGDATABASE=postgres
unset PGOPTIONS

work=$(mktemp -d /tmp/sbqueue-backlog.XXXXXX)
chmod 755 "$work"
cleanup() {
    scripts/pgserver.sh stop "$work/srv" >/dev/null 2>&1 || true
    rm -rf "$work"
}
trap cleanup EXIT
export PGHOST="$work/srv"
PGPORT=$(scripts/pgserver.sh start "$work/srv" --preload)
export PGPORT
sql() { psql -X -At -q -v ON_ERROR_STOP=1 "$@"; }
sql -c "ALTER SYSTEM SET sbqueue.enable_maintenance_worker = off" -c "SELECT pg_reload_conf()" \
    -c "CREATE EXTENSION sbqueue" >/dev/null
version=$(sql -c "SELECT extversion FROM pg_extension WHERE extname = 'sbqueue'")

declare -A ms idx got
for depth in $depths; do
    for round in $(seq 1 "$rounds"); do
        for kind in rows delete memory session; do
            q="b_${kind}_${depth}_$round"
            sid=NULL accept="SELECT 1" mode=peek_lock
            case $kind in
                rows) set_ml=off ;;
                delete) set_ml=on mode=receive_and_delete ;;
                memory) set_ml=on ;;
                session) set_ml=on sid="'s1'"
                    accept="SELECT set_config('bench.token', session_token::text, true) FROM sbq_accept_session('$q', 's1')"
                    receive="sbq_receive_session('$q', current_setting('bench.token')::uuid, 1)" ;;
            esac
            [ "$kind" = session ] || receive="sbq_receive('$q', 1, receive_mode => '$mode')"
            sql -c "SELECT queue FROM sbq_create_queue('$q', requires_session => $sid IS NOT NULL)" \
                -c "SELECT count(*) FROM generate_series(1, $depth) g,
                      LATERAL (SELECT sbq_send_batch('$q', array_fill('expiring'::text, ARRAY[least(500, $depth - g + 1)]),
                                                     session_id => $sid, time_to_live => '1 second')
                                WHERE g % 500 = 1) b" \
                -c "SELECT sbq_send('$q', 'live', session_id => $sid)" >/dev/null
            sleep 1.2
            out=$(sql -F ' ' -c "SET sbqueue.memory_locks = $set_ml" -c "BEGIN" -c "$accept" \
                -c "SELECT clock_timestamp()::text" \
                -c "SELECT count(*) FILTER (WHERE body = 'live'::bytea) FROM $receive" \
                -c "SELECT clock_timestamp()::text" \
                -c "SELECT sum(pg_stat_get_xact_tuples_returned(i.indexrelid))
                      FROM pg_index i JOIN pg_class c ON c.oid = i.indrelid
                     WHERE c.relnamespace = 'sbq'::regnamespace" \
                -c "COMMIT" | tr '\n' '|')
            IFS='|' read -r _ t0 found t1 entries <<<"$out"
            elapsed=$(sql -c "SELECT round(extract(epoch FROM '$t1'::timestamptz - '$t0'::timestamptz) * 1000, 1)")
            ms[$kind,$depth]+="$elapsed "
            idx[$kind,$depth]=$entries
            got[$kind,$depth]=$(( ${got[$kind,$depth]:-0} + found ))
            sql -c "SELECT sbq_delete_queue('$q')" >/dev/null
        done
    done
done

median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
echo "bench/expired_backlog.sh \"$depths\" $rounds: sbqueue $version ($PGBIN), median of $rounds"
echo
echo "| receive | expired ahead | ms | index entries read | returned the message behind |"
echo "|---|---:|---:|---:|---:|"
for kind in rows delete memory session; do
    for depth in $depths; do
        echo "| $kind | $depth | $(echo "${ms[$kind,$depth]}" | median) | ${idx[$kind,$depth]} | ${got[$kind,$depth]} of $rounds |"
    done
done
