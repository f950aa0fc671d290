#!/usr/bin/env bash
# bench/session_calls.sh: where a session drain spends the server's time, call by call.
#
#   bench/session_calls.sh [SESSIONS] [ROUNDS]     defaults: 1000 sessions, 5 rounds
#
# Issue 15's target 6 compares draining sessions of 10 messages with the plain cycle
# of the same messages (bench/sessions.sh), which clients and commits dominate on
# two cores. This measures the server alone: a procedure drains SESSIONS sessions of
# 10 messages, each as the one-call-per-operation client does it (accept the next
# session, receive 10, complete them, receive again and find none, release), and
# commits after each session; it adds up the time of each call (clock_timestamp()
# around it). The plain cycle of the same 10 messages (receive 10, complete them,
# commit) runs the same way. Each round drains a fresh fill, the two drains taking
# turns to go first, with a VACUUM of the messages between them. Printed as a Markdown
# table: each call's median microseconds per session (per 10 messages) over the
# rounds, and the median, lowest and highest of each drain's total per round.
#
# Measures the sbqueue installed for $PG_CONFIG (it builds nothing: run `make
# install` first). One throwaway server (scripts/pgserver.sh --preload, the
# maintenance worker off), synchronous_commit off in the measuring session so
# that the commits' WAL flushes do not hide the calls.
set -euo pipefail
cd "$(dirname "$0")/.."
sessions=${1:-1000}
rounds=${2:-5}

PG_CONFIG=${PG_CONFIG:-/usr/lib/postgresql/${PG_MAJOR:-15}/bin/pg_config}
export PGBIN=${PGBIN:-$("$PG_CONFIG" --bindir)}
export PGUSER=postgres PGDATABASE=postgres
unset PGOPTIONS

work=$(mktemp -d /tmp/sbqueue-session-calls.XXXXXX)
chmod 755 "$work"
cleanup() {
    scripts/pgserver.sh stop "$work/srv" >/dev/null 2>&1 || true
    rm -rf "$work"
}
trap cleanup EXIT

port=$(scripts/pgserver.sh start "$work/srv" --preload)
export PGHOST="$work/srv" PGPORT="$port"
psql -X -q -c "ALTER SYSTEM SET sbqueue.enable_maintenance_worker = off" -c "SELECT pg_reload_conf()" >/dev/null

psql -X -q -v ON_ERROR_STOP=1 >/dev/null <<'SQL'
CREATE EXTENSION sbqueue;
SELECT sbq_create_queue('sq', requires_session => true);
SELECT sbq_create_queue('pq');
CREATE TABLE timings (round int, what text, seconds float8);
-- one session: accept, receive 10, complete, receive none, release, commit
CREATE PROCEDURE drain_sessions(rnd int, n int) LANGUAGE plpgsql AS $$
DECLARE
    tok uuid; toks uuid[]; t0 timestamptz;
    t float8[] := '{0,0,0,0,0,0}';
BEGIN
    FOR i IN 1 .. n LOOP
        t0 := clock_timestamp();
        SELECT session_token INTO tok FROM sbq_accept_session('sq');
        t[1] := t[1] + extract(epoch FROM clock_timestamp() - t0); t0 := clock_timestamp();
        SELECT array_agg(lock_token) INTO toks FROM sbq_receive_session('sq', tok, 10);
        t[2] := t[2] + extract(epoch FROM clock_timestamp() - t0); t0 := clock_timestamp();
        PERFORM sbq_complete('sq', toks);
        t[3] := t[3] + extract(epoch FROM clock_timestamp() - t0); t0 := clock_timestamp();
        PERFORM count(*) FROM sbq_receive_session('sq', tok, 10);
        t[4] := t[4] + extract(epoch FROM clock_timestamp() - t0); t0 := clock_timestamp();
        PERFORM sbq_release_session('sq', tok);
        t[5] := t[5] + extract(epoch FROM clock_timestamp() - t0); t0 := clock_timestamp();
        COMMIT;
        t[6] := t[6] + extract(epoch FROM clock_timestamp() - t0);
    END LOOP;
    INSERT INTO timings
    SELECT rnd, w, s / n FROM unnest(ARRAY['session: accept', 'session: receive 10', 'session: complete 10',
                                           'session: receive, none left', 'session: release',
                                           'session: commit'], t) AS u(w, s);
    COMMIT;
END $$;
-- the plain cycle of 10: receive 10, complete, commit
CREATE PROCEDURE drain_plain(rnd int, n int) LANGUAGE plpgsql AS $$
DECLARE
    toks uuid[]; t0 timestamptz;
    t float8[] := '{0,0,0}';
BEGIN
    FOR i IN 1 .. n LOOP
        t0 := clock_timestamp();
        SELECT array_agg(lock_token) INTO toks FROM sbq_receive('pq', 10);
        t[1] := t[1] + extract(epoch FROM clock_timestamp() - t0); t0 := clock_timestamp();
        PERFORM sbq_complete('pq', toks);
        t[2] := t[2] + extract(epoch FROM clock_timestamp() - t0); t0 := clock_timestamp();
        COMMIT;
        t[3] := t[3] + extract(epoch FROM clock_timestamp() - t0);
    END LOOP;
    INSERT INTO timings
    SELECT rnd, w, s / n FROM unnest(ARRAY['plain: receive 10', 'plain: complete 10', 'plain: commit'], t) AS u(w, s);
    COMMIT;
END $$;
SQL

for ((r = 1; r <= rounds; r++)); do
    psql -X -q -v ON_ERROR_STOP=1 >/dev/null <<SQL
SELECT count(sbq_send('sq', 'session message body'::text,
                      session_id => 's' || lpad((i / 10)::text, 6, '0')))
  FROM generate_series(0, $sessions * 10 - 1) i;
SELECT count(sbq_send('pq', 'session message body'::text)) FROM generate_series(1, $sessions * 10);
VACUUM ANALYZE sbq.messages;
SET synchronous_commit = off;
$([ $((r % 2)) = 1 ] && echo "CALL drain_sessions($r, $sessions);" || echo "CALL drain_plain($r, $sessions);")
VACUUM sbq.messages;
$([ $((r % 2)) = 1 ] && echo "CALL drain_plain($r, $sessions);" || echo "CALL drain_sessions($r, $sessions);")
SQL
done

echo "bench/session_calls.sh $sessions $rounds: the server's microseconds per session of 10 messages (per 10 plain ones), $rounds rounds"
echo
echo "| call | µs (median) | lowest | highest |"
echo "|---|---:|---:|---:|"
psql -X -q -At -c "
    WITH per_call AS (
        SELECT what AS k, 0 AS total, '| ' || what AS label,
               percentile_disc(0.5) WITHIN GROUP (ORDER BY seconds) * 1e6 AS med,
               min(seconds) * 1e6 AS lo, max(seconds) * 1e6 AS hi
          FROM timings GROUP BY what),
    per_round AS (
        SELECT round, split_part(what, ':', 1) AS side, sum(seconds) AS seconds
          FROM timings GROUP BY round, split_part(what, ':', 1)),
    totals AS (
        SELECT side AS k, 1 AS total, '| **' || side || ', the round''s total**' AS label,
               percentile_disc(0.5) WITHIN GROUP (ORDER BY seconds) * 1e6 AS med,
               min(seconds) * 1e6 AS lo, max(seconds) * 1e6 AS hi
          FROM per_round GROUP BY side)
    SELECT label || ' | ' || round(med::numeric, 1) || ' | ' || round(lo::numeric, 1) || ' | '
           || round(hi::numeric, 1) || ' |'
      FROM (SELECT * FROM per_call UNION ALL SELECT * FROM totals) x
     ORDER BY split_part(k, ':', 1) DESC, total, k"
echo
psql -X -q -At -c "
    WITH per_round AS (
        SELECT round, split_part(what, ':', 1) AS side, sum(seconds) AS seconds
          FROM timings GROUP BY round, split_part(what, ':', 1)),
    med AS (SELECT side, percentile_disc(0.5) WITHIN GROUP (ORDER BY seconds) AS s
              FROM per_round GROUP BY side)
    SELECT 'a session drain''s rate against the plain cycle''s, in the server (median totals): '
           || round(((SELECT s FROM med WHERE side = 'plain') / (SELECT s FROM med WHERE side = 'session'))::numeric, 2)
           || 'x'"
