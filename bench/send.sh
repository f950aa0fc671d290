#!/usr/bin/env bash
# bench/send.sh: what a send costs, against the plain-SQL INSERTs it competes with.
#
#   bench/send.sh [SECONDS] [ROUNDS]      defaults: 10 s cells, 3 rounds; about 5 minutes
#
# Measures the sbqueue installed for $PG_CONFIG (it builds nothing: run `make
# install` first; to measure another build, point PG_CONFIG at a relocated
# copy of PostgreSQL's trees it was installed into, as bench/ab.sh makes). One
# throwaway server (scripts/pgserver.sh --preload: fsync and synchronous_commit
# on; shared_buffers 1GB and max_wal_size 8GB as bench/run.sh; the
# maintenance worker off, so it does not run between cells). Contenders, each
# the same 101-byte body:
#   sbqueue     sbq_send / sbq_send_batch to a queue with default properties
#   SKIP LOCKED bench/baseline_skip_locked.sql's table: an id, the time, the
#               lock columns, the body; its primary key is its receive index
#   many queues the same table with a queue name, for many queues in one table
#               as sbq.messages has them: a primary key and a receive index on
#               (queue, id)
# Cells: pgbench -M prepared, 4 clients, 1 message per transaction and 100
# per transaction (one INSERT ... SELECT, one sbq_send_batch), each with
# synchronous_commit on and (per connection) off; every round runs every cell
# of every contender in turn, the order reversed every other round; the
# median. WAL bytes per message from pg_current_wal_lsn(). Then the server's
# own time per send, without the client or the commit: a DO block that sends
# 20,000 messages one by one in one transaction, 5 times in turn per contender
# (the median, in microseconds per message); SEND_CELLS=0 measures only this.
# Prints a Markdown report.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-10}
rounds=${2:-3}
command="bench/send.sh $*"
command=${command% }

PG_CONFIG=${PG_CONFIG:-/usr/lib/postgresql/${PG_MAJOR:-15}/bin/pg_config}
export PGBIN=${PGBIN:-$("$PG_CONFIG" --bindir)}
export PATH="$PGBIN:$PATH"
export PGUSER=postgres PGDATABASE=postgres
unset PGOPTIONS

work=$(mktemp -d /tmp/sbqueue-send.XXXXXX)
chmod 755 "$work"
cleanup() {
    scripts/pgserver.sh stop "$work/srv" >/dev/null 2>&1 || true
    rm -rf "$work"
}
trap cleanup EXIT
log() { echo "send: $(date +%H:%M:%S) $*" >&2; }

port=$(scripts/pgserver.sh start "$work/srv" --preload)
export PGHOST="$work/srv" PGPORT="$port"
psql -X -q -v ON_ERROR_STOP=1 -c "ALTER SYSTEM SET shared_buffers = '1GB'" \
    -c "ALTER SYSTEM SET max_wal_size = '8GB'" \
    -c "ALTER SYSTEM SET sbqueue.enable_maintenance_worker = off"
scripts/pgserver.sh stop "$work/srv"
port=$(scripts/pgserver.sh start "$work/srv" "$port" --preload)
psql -X -q -v ON_ERROR_STOP=1 -c "CREATE EXTENSION sbqueue" -c "SELECT sbq_create_queue('bench')" >/dev/null
psql -X -q -v ON_ERROR_STOP=1 -f bench/baseline_skip_locked.sql >/dev/null
psql -X -q -v ON_ERROR_STOP=1 >/dev/null <<'SQL'
CREATE TABLE skm_messages (
    id bigserial PRIMARY KEY,
    queue text NOT NULL,
    enqueued_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    lock_token uuid,
    locked_until timestamptz,
    delivery_count integer NOT NULL DEFAULT 0,
    body text NOT NULL
) WITH (fillfactor = 80);
CREATE INDEX skm_messages_receive_idx ON skm_messages (queue, id);
SQL

body="'bench message body: 0123456789 abcdefghijklmnopqrstuvwxyz ABCDEFGHIJKLMNOPQRSTUVWXYZ 0123456789 end'"
declare -A one=(
    [sbq]="SELECT sbq_send('bench', $body::text);"
    [skq]="INSERT INTO skq_messages (body) VALUES ($body);"
    [skm]="INSERT INTO skm_messages (queue, body) VALUES ('bench', $body);"
)
declare -A many=(
    [sbq]="SELECT count(*) FROM sbq_send_batch('bench', array_fill($body::text, ARRAY[100]));"
    [skq]="INSERT INTO skq_messages (body) SELECT $body FROM generate_series(1, 100);"
    [skm]="INSERT INTO skm_messages (queue, body) SELECT 'bench', $body FROM generate_series(1, 100);"
)
declare -A name=([sbq]=sbqueue [skq]="SKIP LOCKED" [skm]="many queues")
contenders=(sbq skq skm)

empty() {
    psql -X -q -c "TRUNCATE skq_messages, skm_messages" -c "SELECT sbq_purge_queue('bench')" \
        -c "VACUUM ANALYZE sbq.messages, skq_messages, skm_messages" -c "CHECKPOINT" >/dev/null
}
count() {
    case $1 in
    sbq) psql -X -Atc "SELECT count(*) FROM sbq.messages" ;;
    skq) psql -X -Atc "SELECT count(*) FROM skq_messages" ;;
    skm) psql -X -Atc "SELECT count(*) FROM skm_messages" ;;
    esac
}

declare -A rate wal
cells=("one on" "one off" "many on" "many off")
# SEND_CELLS=0: only the server's time per send (for comparing builds one after another)
[ "${SEND_CELLS:-1}" = 0 ] && rounds=0
for r in $(seq "$rounds"); do
    order=("${contenders[@]}")
    [ $((r % 2)) -eq 0 ] && order=(skm skq sbq)
    for cell in "${cells[@]}"; do
        set -- $cell
        kind=$1 sync=$2
        for c in "${order[@]}"; do
            empty
            if [ "$kind" = one ]; then script=${one[$c]}; else script=${many[$c]}; fi
            echo "$script" >"$work/script.sql"
            l0=$(psql -X -Atc "SELECT pg_current_wal_lsn()")
            PGOPTIONS="-c synchronous_commit=$sync" pgbench -n -M prepared -c 4 -j 2 -T "$secs" \
                -f "$work/script.sql" >"$work/out" 2>&1 || { cat "$work/out" >&2; exit 1; }
            l1=$(psql -X -Atc "SELECT pg_current_wal_lsn()")
            n=$(count "$c")
            rate[$kind,$sync,$c]+="$(awk -v n="$n" -v s="$secs" 'BEGIN {printf "%d", n / s}') "
            wal[$kind,$sync,$c]+="$(psql -X -Atc "SELECT round(pg_wal_lsn_diff('$l1', '$l0') / greatest($n, 1))") "
            log "round $r $kind sync=$sync ${name[$c]}: $n messages"
        done
    done
done

median() { tr ' ' '\n' | grep -v '^$' | sort -n | awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)]}'; }

# the server's own time per send: a DO block of 20,000 sends in one transaction
declare -A us
for r in 1 2 3 4 5; do
    for c in "${contenders[@]}"; do
        empty
        case $c in
        sbq) stmt="PERFORM sbq_send('bench', $body::text)" ;;
        skq) stmt="INSERT INTO skq_messages (body) VALUES ($body)" ;;
        skm) stmt="INSERT INTO skm_messages (queue, body) VALUES ('bench', $body)" ;;
        esac
        ms=$(psql -X -At -c '\timing on' -c "DO \$\$ BEGIN FOR i IN 1..20000 LOOP $stmt; END LOOP; END \$\$" |
            sed -n 's/^Time: \([0-9.]*\) ms.*/\1/p')
        us[$c]+="$(awk -v ms="$ms" 'BEGIN {printf "%.2f", ms * 1000 / 20000}') "
    done
done

version=$(psql -X -Atc "SELECT extversion FROM pg_extension WHERE extname = 'sbqueue'")
if [ "$rounds" = 0 ]; then
    echo "server µs per send (median of 5): sbqueue $(echo "${us[sbq]}" | median), SKIP LOCKED $(echo "${us[skq]}" | median), many queues $(echo "${us[skm]}" | median); runs: sbqueue ${us[sbq]% }"
    exit 0
fi
echo "Measured with \`$command\` (sbqueue $version), $(date -u +%Y-%m-%d), $(nproc) CPUs, $(psql -X -Atc 'SHOW server_version'),"
echo "4 clients (pgbench -M prepared, -j 2), $secs s cells, the median of $rounds rounds."
echo
echo "| cell | sbqueue msg/s | SKIP LOCKED msg/s | many queues msg/s | sbqueue / SKIP LOCKED | sbqueue / many queues | WAL B/msg (sbqueue, SKIP LOCKED, many queues) |"
echo "|---|---:|---:|---:|---:|---:|---|"
for cell in "${cells[@]}"; do
    set -- $cell
    kind=$1 sync=$2
    label=$([ "$kind" = one ] && echo "send 1 / tx" || echo "send 100 / tx")
    s=$(echo "${rate[$kind,$sync,sbq]}" | median)
    k=$(echo "${rate[$kind,$sync,skq]}" | median)
    m=$(echo "${rate[$kind,$sync,skm]}" | median)
    echo "| $label, synchronous_commit $sync | $s | $k | $m | $(awk -v a="$s" -v b="$k" 'BEGIN {printf "%.2fx", a / b}') | $(awk -v a="$s" -v b="$m" 'BEGIN {printf "%.2fx", a / b}') | $(echo "${wal[$kind,$sync,sbq]}" | median), $(echo "${wal[$kind,$sync,skq]}" | median), $(echo "${wal[$kind,$sync,skm]}" | median) |"
done
echo
echo "Runs (msg/s): $(for cell in "${cells[@]}"; do set -- $cell; for c in "${contenders[@]}"; do printf '%s %s %s: %s; ' "$1" "$2" "${name[$c]}" "${rate[$1,$2,$c]% }"; done; done)"
echo
echo "The server's time per send (a DO block of 20,000 in one transaction, no client, no commit; median of 5):"
echo
echo "| sbqueue µs | SKIP LOCKED µs | many queues µs |"
echo "|---:|---:|---:|"
echo "| $(echo "${us[sbq]}" | median) | $(echo "${us[skq]}" | median) | $(echo "${us[skm]}" | median) |"
echo
echo "Runs (µs): sbqueue ${us[sbq]% }; SKIP LOCKED ${us[skq]% }; many queues ${us[skm]% }"
