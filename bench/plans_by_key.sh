#!/usr/bin/env bash
# bench/plans_by_key.sh: a batch settlement in a session whose plans were made
# while the queue table was empty and freshly analyzed, once the queue has filled.
#
#   bench/plans_by_key.sh [DEPTH] [CALLS]     defaults: 200000 messages, 20 calls
#
# Measures the sbqueue installed for $PG_CONFIG (it builds nothing: run `make
# install` first; for another build, point PG_CONFIG at a relocated copy of
# PostgreSQL's trees it was installed into, as bench/ab.sh makes). One throwaway
# server (scripts/pgserver.sh --preload, the maintenance worker off), autovacuum
# off for sbq.messages so that nothing analyzes it meanwhile. A session sends,
# receives and completes 100 messages ten times on the empty queue (its plans are
# made then); another sends DEPTH messages; then the first session and a new one
# each receive 100 and complete them (two transactions) CALLS times. Prints the
# mean milliseconds of a receive and of a complete of 100 in each session.
set -euo pipefail
cd "$(dirname "$0")/.."
depth=${1:-200000}
calls=${2:-20}

PG_CONFIG=${PG_CONFIG:-/usr/lib/postgresql/${PG_MAJOR:-15}/bin/pg_config}
export PGBIN=${PGBIN:-$("$PG_CONFIG" --bindir)}
unset PGOPTIONS

work=$(mktemp -d /tmp/sbqueue-plans.XXXXXX)
chmod 755 "$work"
cleanup() {
    scripts/pgserver.sh stop "$work/srv" >/dev/null 2>&1 || true
    rm -rf "$work"
}
trap cleanup EXIT
port=$(scripts/pgserver.sh start "$work/srv" --preload | tail -1)
"$PGBIN/psql" -X -q -h "$work/srv" -p "$port" -U postgres -d postgres \
    -c "ALTER SYSTEM SET sbqueue.enable_maintenance_worker = off" -c "SELECT pg_reload_conf()" >/dev/null

/usr/bin/python3 - "$work/srv" "$port" "$depth" "$calls" <<'PY'
import sys, time
import psycopg

host, port, depth, calls = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])


def connect():
    return psycopg.connect(host=host, port=port, user='postgres', dbname='postgres',
                           autocommit=True)


def cycle(conn):
    t0 = time.perf_counter()
    tokens = [r[0] for r in conn.execute("SELECT lock_token FROM sbq_receive('bench', 100)")]
    t1 = time.perf_counter()
    conn.execute("SELECT sbq_complete('bench', %s::uuid[])", (tokens,))
    return t1 - t0, time.perf_counter() - t1


def measure(conn):
    times = [cycle(conn) for _ in range(calls)]
    return [sum(t[i] for t in times) / calls * 1000 for i in (0, 1)]


admin = connect()
admin.execute("CREATE EXTENSION sbqueue")
admin.execute("SELECT sbq_create_queue('bench')")
admin.execute("ALTER TABLE sbq.messages SET (autovacuum_enabled = off)")
admin.execute("VACUUM ANALYZE sbq.messages")
old = connect()
for _ in range(10):
    old.execute("SELECT sbq_send_batch('bench', array_fill('x'::text, ARRAY[100]))")
    cycle(old)
for _ in range(depth // 5000):
    admin.execute("SELECT count(*) FROM sbq_send_batch('bench', array_fill('x'::text, ARRAY[5000]))")
r_old, c_old = measure(old)
r_new, c_new = measure(connect())
print(f"{depth} queued, {calls} calls of 100: session of the empty table: receive {r_old:.2f} ms, "
      f"complete {c_old:.2f} ms; new session: receive {r_new:.2f} ms, complete {c_new:.2f} ms")
PY
