#!/usr/bin/env bash
# examples/c/test.sh: builds the worker and runs it against the server of the
# PG* environment (a database with sbqueue). 12 messages in a queue whose locks
# last 5 s, one batch that takes 6 s to handle: the worker must renew every
# lock to complete them, and complete all 12 with none lost.
set -euo pipefail
cd "$(dirname "$0")"
make -s PG_CONFIG="${PG_CONFIG:-pg_config}"
q="c-example-$$"
psql -X -q -v ON_ERROR_STOP=1 -c "SELECT sbq_create_queue('$q', lock_duration => '5 seconds')" \
    -c "SELECT count(sbq_send('$q', 'message ' || i)) FROM generate_series(1, 12) i" >/dev/null
out=$(./worker -q "$q" -b 12 -w 1 -s 6000)
echo "$out"
left=$(psql -X -A -t -c "SELECT count(*) FROM sbq_peek('$q', 100)")
stats=$(psql -X -A -t -c "SELECT completed || ' ' || received FROM sbq_queue_stats WHERE queue = '$q'")
psql -X -q -c "SELECT sbq_delete_queue('$q')" >/dev/null
last=$(echo "$out" | tail -1)
renewed=$(echo "$last" | sed -E 's/.*renewed ([0-9]+).*/\1/')
[[ "$last" == "completed 12 renewed "*" lost 0" ]] || { echo "c example: expected 12 completed, none lost" >&2; exit 1; }
[ "$renewed" -ge 12 ] || { echo "c example: expected every lock renewed, got $renewed renewals" >&2; exit 1; }
[ "$left" = 0 ] || { echo "c example: $left messages left" >&2; exit 1; }
[ "$stats" = "12 12" ] || { echo "c example: completed/received $stats, expected 12 12" >&2; exit 1; }
echo "c example: ok"
