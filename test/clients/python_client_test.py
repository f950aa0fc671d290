#!/usr/bin/python3
"""
python_client_test.py: what a new user does with sbqueue from Python (psycopg 3).

Creates a queue, sends a text, a bytea and a jsonb body (plain Python values: str, bytes
and psycopg's Jsonb), receives them, checks bodies, content types, application
properties, completes and abandons until a message is dead-lettered, reads it from
"<queue>/$deadletterqueue", checks that bad lock tokens raise SQLSTATE SB002, and
deletes the queue. Then a session worker: orders sent to a queue with sessions, two
workers that each accept the next session, process its messages in order and keep
their progress in the session state.

Usage:
  python3 test/clients/python_client_test.py --host /tmp/sbq-conc --port 54402 \\
      --dbname sbq [--user postgres]

Prints one line per check and a last line "N passed, M failed"; exits 1 on failure.
"""

import argparse
import datetime
import json
import os
import sys
import threading
import time
import traceback
import uuid

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "harness"))
import sbq_db  # noqa: E402  (psycopg, or a run under Debian's python3 that has it)
from sbq_db import psycopg  # noqa: E402
from psycopg.rows import dict_row  # noqa: E402
from psycopg.types.json import Jsonb  # noqa: E402

p = argparse.ArgumentParser(description="sbqueue: a new user's flow with psycopg 3")
sbq_db.add_connection_args(p)
ARGS = p.parse_args()

PASSED = 0
FAILED = 0


def check(name, cond, detail=""):
    global PASSED, FAILED
    if cond:
        PASSED += 1
        print("ok   - %s" % name)
    else:
        FAILED += 1
        print("FAIL - %s%s" % (name, (": " + detail) if detail else ""))
    return cond


def eq(name, got, expected):
    return check(name, got == expected, "expected %r, got %r" % (expected, got))


def raises(name, sqlstate, fn):
    """Runs fn, which must raise a psycopg error with that SQLSTATE."""
    try:
        fn()
    except psycopg.Error as e:
        return check(name, e.sqlstate == sqlstate,
                     "expected SQLSTATE %s, got %s (%s)" % (sqlstate, e.sqlstate, e))
    return check(name, False, "expected SQLSTATE %s, no error was raised" % sqlstate)


def main():
    conn = sbq_db.connect(ARGS, row_factory=dict_row)
    q = "py-client-" + uuid.uuid4().hex[:8]
    try:
        flow(conn, q)
        session_flow(conn, q + "-sessions")
    finally:
        try:
            conn.execute("SELECT sbq_delete_queue(%s)", (q + "-sessions",))
        except psycopg.Error:
            pass
        # Leave nothing behind, even when a step failed.
        try:
            conn.execute("SELECT sbq_delete_queue(%s)", (q,))
        except psycopg.Error:
            pass
        conn.close()


def flow(conn, q):

    # --- a queue
    props = conn.execute(
        "SELECT * FROM sbq_create_queue(%s, lock_duration => %s, max_delivery_count => %s)",
        (q, datetime.timedelta(seconds=5), 2)).fetchone()
    eq("create_queue returns the queue's properties: name", props["queue"], q)
    eq("create_queue: max_delivery_count", props["max_delivery_count"], 2)
    eq("create_queue: lock_duration", props["lock_duration"], datetime.timedelta(seconds=5))
    got = conn.execute("SELECT * FROM sbq_get_queue(%s)", (q.upper(),)).fetchone()
    eq("get_queue finds the queue by a name in another letter case", got and got["queue"], q)
    row = conn.execute("SELECT count(*) AS n FROM sbq_queues WHERE queue = %s", (q,)).fetchone()
    eq("the queue is listed in sbq_queues", row["n"], 1)

    # --- send: a str, bytes and a Jsonb value, as a user would pass them
    text_body = "Grüße aus Köln: 1 € ✓"
    bin_body = bytes([0, 1, 2, 0xFF, 0xFE, 0x80, 0]) + b"\x00binary\x00"
    json_body = {"order": 42, "items": ["tea", "milk"], "ok": True, "price": 3.5, "note": None}
    props_in = {"tenant": "acme", "attempt": 1, "tags": ["a", "b"], "nested": {"x": None}}

    s_text = conn.execute("SELECT sbq_send(%s, %s, application_properties => %s) AS s",
                          (q, text_body, Jsonb(props_in))).fetchone()["s"]
    s_bin = conn.execute("SELECT sbq_send(%s, %s, message_id => %s, subject => %s) AS s",
                         (q, bin_body, "bin-1", "binary")).fetchone()["s"]
    s_json = conn.execute("SELECT sbq_send(%s, %s, correlation_id => %s) AS s",
                          (q, Jsonb(json_body), "corr-7")).fetchone()["s"]
    check("sbq_send returns increasing sequence numbers (int)",
          all(isinstance(s, int) for s in (s_text, s_bin, s_json)) and s_text < s_bin < s_json,
          "got %r" % ([s_text, s_bin, s_json],))
    expected_json_text = conn.execute("SELECT %s::jsonb::text AS t", (Jsonb(json_body),)).fetchone()["t"]

    # --- peek does not lock
    peeked = conn.execute("SELECT * FROM sbq_peek(%s, 10)", (q,)).fetchall()
    eq("peek sees the three messages in order", [m["sequence_number"] for m in peeked],
       [s_text, s_bin, s_json])
    check("peek returns no lock tokens", all(m["lock_token"] is None for m in peeked),
          "got %r" % [m["lock_token"] for m in peeked])
    stats = conn.execute("SELECT * FROM sbq_queue_stats WHERE queue = %s", (q,)).fetchone()
    eq("stats: three active messages", stats and (stats["active_count"], stats["sent"]), (3, 3))

    # --- receive them
    t0 = datetime.datetime.now(datetime.timezone.utc)
    msgs = conn.execute("SELECT * FROM sbq_receive(%s, max_messages => 10)", (q,)).fetchall()
    eq("receive returns all three, lowest sequence number first",
       [m["sequence_number"] for m in msgs], [s_text, s_bin, s_json])
    if len(msgs) != 3:
        raise SystemExit("cannot continue without the three messages")
    mt, mb, mj = msgs
    eq("text body comes back as its UTF-8 bytes", bytes(mt["body"]), text_body.encode("utf-8"))
    eq("text body decodes back to the str", bytes(mt["body"]).decode("utf-8"), text_body)
    eq("bytea body comes back byte for byte", bytes(mb["body"]), bin_body)
    eq("jsonb body is the jsonb's text", bytes(mj["body"]).decode("utf-8"), expected_json_text)
    eq("jsonb body parses back to the dict", json.loads(bytes(mj["body"])), json_body)
    eq("content_type default for text", mt["content_type"], "text/plain; charset=utf-8")
    eq("content_type default for bytea is NULL", mb["content_type"], None)
    eq("content_type default for jsonb", mj["content_type"], "application/json")
    eq("application_properties round-trip as a dict", mt["application_properties"], props_in)
    eq("no application_properties when none were sent", mb["application_properties"], None)
    eq("message_id given at send", mb["message_id"], "bin-1")
    eq("subject given at send", mb["subject"], "binary")
    eq("correlation_id given at send", mj["correlation_id"], "corr-7")
    try:
        uuid.UUID(mt["message_id"])
        ok = True
    except (TypeError, ValueError):
        ok = False
    check("default message_id is a UUID string", ok, "got %r" % mt["message_id"])
    eq("first delivery has delivery_count 1", [m["delivery_count"] for m in msgs], [1, 1, 1])
    check("lock tokens are distinct UUIDs",
          all(isinstance(m["lock_token"], uuid.UUID) for m in msgs)
          and len({m["lock_token"] for m in msgs}) == 3,
          "got %r" % [m["lock_token"] for m in msgs])
    lu = mt["locked_until"]
    check("locked_until is about now + lock_duration (5 s)",
          lu is not None and abs((lu - t0).total_seconds() - 5) < 2, "got %r (now %r)" % (lu, t0))
    eq("state is 'active'", [m["state"] for m in msgs], ["active"] * 3)
    again = conn.execute("SELECT * FROM sbq_receive(%s, 10)", (q,)).fetchall()
    eq("locked messages are not received again", len(again), 0)
    peeked = conn.execute("SELECT * FROM sbq_peek(%s, 10)", (q,)).fetchall()
    eq("peek still sees them, with delivery_count unchanged",
       [m["delivery_count"] for m in peeked], [1, 1, 1])
    stats = conn.execute("SELECT * FROM sbq_queue_stats WHERE queue = %s", (q,)).fetchone()
    eq("stats: three locked, none active", (stats["locked_count"], stats["active_count"]), (3, 0))

    # --- renew, complete (single and array)
    new_lu = conn.execute("SELECT sbq_renew(%s, %s) AS lu", (q, mt["lock_token"])).fetchone()["lu"]
    check("renew returns a later locked_until", new_lu is not None and new_lu >= lu,
          "before %r, after %r" % (lu, new_lu))
    r = conn.execute("SELECT sbq_complete(%s, %s)", (q, mt["lock_token"])).fetchone()
    check("complete(uuid) succeeds", r is not None)
    n = conn.execute("SELECT sbq_complete(%s, %s) AS n", (q, [mb["lock_token"]])).fetchone()["n"]
    eq("complete(uuid[]) with a Python list returns the count", n, 1)
    raises("completing an already completed token raises SB002", "SB002",
           lambda: conn.execute("SELECT sbq_complete(%s, %s)", (q, mt["lock_token"])))
    raises("an unknown token raises SB002", "SB002",
           lambda: conn.execute("SELECT sbq_complete(%s, %s)", (q, uuid.uuid4())))
    raises("abandoning an unknown token raises SB002", "SB002",
           lambda: conn.execute("SELECT sbq_abandon(%s, %s)", (q, uuid.uuid4())))
    raises("renewing an unknown token raises SB002", "SB002",
           lambda: conn.execute("SELECT sbq_renew(%s, %s)", (q, uuid.uuid4())))

    # --- abandon until dead-lettered (max_delivery_count 2)
    conn.execute("SELECT sbq_abandon(%s, %s, %s)",
                 (q, mj["lock_token"], Jsonb({"retry": "yes", "tenant": None})))
    second = conn.execute("SELECT * FROM sbq_receive(%s)", (q,)).fetchall()
    eq("an abandoned message is received again", [m["sequence_number"] for m in second], [s_json])
    if second:
        m2 = second[0]
        eq("second delivery has delivery_count 2", m2["delivery_count"], 2)
        eq("abandon merged properties_to_modify into application_properties",
           m2["application_properties"], {"retry": "yes", "tenant": None})
        check("the second delivery has a new lock token", m2["lock_token"] != mj["lock_token"])
        raises("the first delivery's token is no longer valid (SB002)", "SB002",
               lambda: conn.execute("SELECT sbq_complete(%s, %s)", (q, mj["lock_token"])))
        conn.execute("SELECT sbq_abandon(%s, %s)", (q, m2["lock_token"]))
    rest = conn.execute("SELECT * FROM sbq_receive(%s, 10)", (q,)).fetchall()
    eq("after max_delivery_count abandons the queue has nothing to receive", len(rest), 0)
    peeked = conn.execute("SELECT * FROM sbq_peek(%s, 10)", (q,)).fetchall()
    eq("nor anything to peek", len(peeked), 0)
    stats = conn.execute("SELECT * FROM sbq_queue_stats WHERE queue = %s", (q,)).fetchone()
    eq("stats: one dead letter, counters sent/received/completed/dead_lettered",
       stats and (stats["dead_letter_count"], stats["sent"], stats["received"], stats["completed"],
                  stats["dead_lettered"]), (1, 3, 4, 2, 1))
    # Whether the abandon that dead-lettered counts as an abandon too, API.md leaves open.
    check("stats: abandoned counts the first abandon (and maybe the dead-lettering one)",
          stats is not None and stats["abandoned"] in (1, 2), "got %r" % (stats and stats["abandoned"]))

    dlq = q + "/$deadletterqueue"
    peeked = conn.execute("SELECT * FROM sbq_peek(%s, 10)", (dlq,)).fetchall()
    eq("the dead letter can be peeked in <queue>/$deadletterqueue",
       [m["sequence_number"] for m in peeked], [s_json])
    dead = conn.execute("SELECT * FROM sbq_receive(%s, 10)", (q + "/$DeadLetterQueue",)).fetchall()
    eq("the dead letter is received from <queue>/$DeadLetterQueue (any case)",
       [m["sequence_number"] for m in dead], [s_json])
    if dead:
        d = dead[0]
        eq("dead letter reason", d["dead_letter_reason"], "MaxDeliveryCountExceeded")
        eq("dead letter keeps the body", json.loads(bytes(d["body"])), json_body)
        eq("dead letter keeps content_type", d["content_type"], "application/json")
        eq("dead letter keeps application_properties", d["application_properties"],
           {"retry": "yes", "tenant": None})
        check("dead letter has a lock token", isinstance(d["lock_token"], uuid.UUID))
        print("     (dead letter: delivery_count=%r, error_description=%r, source=%r)"
              % (d["delivery_count"], d["dead_letter_error_description"], d["dead_letter_source"]))
        raises("a dead letter's token is not valid on the main queue (SB002)", "SB002",
               lambda: conn.execute("SELECT sbq_complete(%s, %s)", (q, d["lock_token"])))
        conn.execute("SELECT sbq_complete(%s, %s)", (dlq, d["lock_token"]))
    eq("the dead-letter queue is empty after completing", 
       len(conn.execute("SELECT * FROM sbq_peek(%s, 10)", (dlq,)).fetchall()), 0)

    # --- an expired lock token
    conn.execute("SELECT sbq_send(%s, %s)", (q, "short-lived lock"))
    m = conn.execute("SELECT * FROM sbq_receive(%s)", (q,)).fetchone()
    if check("receive the message for the expiry test", m is not None):
        time.sleep(5.6)
        raises("an expired lock token raises SB002", "SB002",
               lambda: conn.execute("SELECT sbq_complete(%s, %s)", (q, m["lock_token"])))
        m2 = conn.execute("SELECT * FROM sbq_receive(%s)", (q,)).fetchone()
        check("after the lock expired the message is received again with delivery_count 2",
              m2 is not None and m2["sequence_number"] == m["sequence_number"]
              and m2["delivery_count"] == 2, "got %r" % ((m2 and (m2["sequence_number"], m2["delivery_count"])),))
        if m2:
            conn.execute("SELECT sbq_complete(%s, %s)", (q, m2["lock_token"]))

    # --- a rolled-back send and a rolled-back receive never happened
    with conn.transaction(force_rollback=True):
        conn.execute("SELECT sbq_send(%s, %s)", (q, "never"))
    eq("a rolled-back send leaves nothing", len(conn.execute(
        "SELECT * FROM sbq_peek(%s, 10)", (q,)).fetchall()), 0)

    # --- receive_and_delete
    s_rd = conn.execute("SELECT sbq_send(%s, %s) AS s", (q, "fire and forget")).fetchone()["s"]
    rd = conn.execute("SELECT * FROM sbq_receive(%s, 5, receive_mode => 'receive_and_delete')",
                      (q,)).fetchall()
    eq("receive_and_delete returns the message", [m["sequence_number"] for m in rd], [s_rd])
    if rd:
        eq("receive_and_delete: no lock token, no locked_until, delivery_count 1",
           (rd[0]["lock_token"], rd[0]["locked_until"], rd[0]["delivery_count"]), (None, None, 1))
        eq("receive_and_delete: body", bytes(rd[0]["body"]), b"fire and forget")
    eq("receive_and_delete removed it", len(conn.execute(
        "SELECT * FROM sbq_peek(%s, 10)", (q,)).fetchall()), 0)

    # --- errors a user meets
    raises("a queue that does not exist raises SB001", "SB001",
           lambda: conn.execute("SELECT sbq_send(%s, %s)", ("no-such-queue-" + q, "x")))
    raises("a bad queue name raises 22023", "22023",
           lambda: conn.execute("SELECT sbq_create_queue(%s)", ("bad name!",)))
    raises("a NULL body raises 22004", "22004",
           lambda: conn.execute("SELECT sbq_send(%s, NULL::text)", (q,)))
    raises("application_properties that are not a JSON object raise 22023", "22023",
           lambda: conn.execute("SELECT sbq_send(%s, %s, application_properties => %s)",
                                (q, "x", Jsonb([1, 2]))))

    # --- delete
    conn.execute("SELECT sbq_delete_queue(%s)", (q,))
    raises("a deleted queue is gone (SB001)", "SB001",
           lambda: conn.execute("SELECT * FROM sbq_get_queue(%s)", (q,)))


def session_worker(q, seen, errors):
    """Accept the next session, process its messages in order, keep progress in the
    session state (the number of steps done, as text), release; until none is left."""
    conn = sbq_db.connect(ARGS, row_factory=dict_row)
    conn.autocommit = True
    try:
        while True:
            acc = conn.execute("SELECT * FROM sbq_accept_session(%s, max_wait => %s)",
                               (q, datetime.timedelta(seconds=1))).fetchone()
            if acc is None:
                return
            sid, tok = acc["session_id"], acc["session_token"]
            while True:
                state = conn.execute("SELECT sbq_get_session_state(%s, %s) AS s",
                                     (q, tok)).fetchone()["s"]
                done = int(bytes(state).decode()) if state is not None else 0
                msgs = conn.execute("SELECT * FROM sbq_receive_session(%s, %s, 2)",
                                    (q, tok)).fetchall()
                if not msgs:
                    break
                for m in msgs:
                    step = json.loads(bytes(m["body"]))["step"]
                    if step != done + 1:
                        errors.append("%s: step %d after %d" % (sid, step, done))
                    # settle and record progress in one transaction
                    with conn.transaction():
                        conn.execute("SELECT sbq_complete(%s, %s)", (q, m["lock_token"]))
                        conn.execute("SELECT sbq_set_session_state(%s, %s, %s)",
                                     (q, tok, str(step).encode()))
                    seen.setdefault(sid, []).append(step)
                    done = step
            conn.execute("SELECT sbq_release_session(%s, %s)", (q, tok))
    except Exception as e:      # noqa: BLE001
        errors.append("worker: %s: %s" % (type(e).__name__, e))
    finally:
        conn.close()


def session_flow(conn, q):
    conn.execute("SELECT sbq_create_queue(%s, requires_session => true)", (q,))
    raises("a send without session_id to a session queue raises 22023", "22023",
           lambda: conn.execute("SELECT sbq_send(%s, %s)", (q, "x")))
    raises("a plain receive on a session queue raises SB010", "SB010",
           lambda: conn.execute("SELECT * FROM sbq_receive(%s)", (q,)).fetchall())
    orders = ["order-%d" % i for i in range(6)]
    # the steps of the orders interleaved, as producers would send them
    for step in range(1, 5):
        for o in orders:
            conn.execute("SELECT sbq_send(%s, %s, session_id => %s)",
                         (q, Jsonb({"order": o, "step": step}), o))
    listed = conn.execute("SELECT * FROM sbq_list_sessions(%s)", (q,)).fetchall()
    eq("list_sessions: six sessions of four available messages each",
       sorted((r["session_id"], r["available_count"]) for r in listed),
       [(o, 4) for o in orders])
    seen, errors = {}, []
    workers = [threading.Thread(target=session_worker, args=(q, seen, errors)) for _ in range(2)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(60)
    eq("session workers: no error, every step in order", errors, [])
    eq("session workers: each order's four steps processed once, in order",
       {o: seen.get(o) for o in orders}, {o: [1, 2, 3, 4] for o in orders})
    left = conn.execute("SELECT count(*) AS n FROM sbq_peek(%s, 100)", (q,)).fetchone()["n"]
    eq("session workers: the queue is empty", left, 0)
    acc = conn.execute("SELECT * FROM sbq_accept_session(%s, %s)", (q, "order-3")).fetchone()
    state = conn.execute("SELECT sbq_get_session_state(%s, %s) AS s",
                         (q, acc["session_token"])).fetchone()["s"]
    eq("session state outlives the session's messages", bytes(state), b"4")
    raises("accepting a held session raises SB005", "SB005",
           lambda: conn.execute("SELECT * FROM sbq_accept_session(%s, %s)", (q, "order-3")))
    conn.execute("SELECT sbq_release_session(%s, %s)", (q, acc["session_token"]))
    raises("a released session token raises SB004", "SB004",
           lambda: conn.execute("SELECT sbq_renew_session(%s, %s)", (q, acc["session_token"])))


if __name__ == "__main__":
    try:
        main()
    except SystemExit as e:
        if e.code not in (None, 0):
            FAILED += 1
            print("FAIL - %s" % e.code)
    except Exception as e:      # noqa: BLE001
        FAILED += 1
        print("FAIL - unexpected %s: %s" % (type(e).__name__, e))
        traceback.print_exc()
    print("%d passed, %d failed" % (PASSED, FAILED))
    sys.exit(1 if FAILED else 0)
