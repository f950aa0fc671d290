#!/usr/bin/python3
"""
session_drain_test.py: producers and consumers on one session queue at the same time.

Producers send to a few sessions while consumers drain them: accept the next session,
receive its messages in small batches (now and then the completion and the next receive
in one statement, or a receive and its completion in one transaction), complete them,
receive until one comes back empty, release (now and then after one batch, with messages
left in the session, which puts it back in line at its first one). Sessions are drained, forgotten and made
again all the time, so accept-next's walk of its line, its look at each session, the
receive that finds a session empty and the release of a drained one (the looks through
the indexes, src/session_probe.c) meet sends, releases and forgets of other connections.
With --hold, a REPEATABLE READ transaction stays open from before the first send to the
end, so every mark a drain moves or takes off stays in the line's index, and accept-next
starts its walk at the line's floor (src/qstate.c), which the walks raise and releases
lower meanwhile. Checked afterwards:

  * every committed send is completed exactly once, and nothing else is;
  * within a session, messages are handed out in the order they were sent
    (sequence numbers increase from one hand-out to the next);
  * a session is held by one consumer at a time (no two holders' intervals of a
    session overlap, by the server's clock: clock_timestamp() at accept and release);
  * once every send has committed, a session drained until a receive came back short
    is empty: no later accept of it hands out anything;
  * at the end the queue holds nothing and no session row is left.

Usage:
  python3 test/concurrency/session_drain_test.py --host H --port P --dbname D
      [--messages 3000] [--sessions 40] [--consumers 4] [--producers 2] [--hold]

Prints each check and a last line "N passed, M failed"; exits 1 when a check fails.
Needs psycopg 3 (Debian: python3-psycopg).
"""

import argparse
import collections
import os
import random
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "harness"))
import sbq_db  # noqa: E402

Q = "sdrain"


def parse_args():
    p = argparse.ArgumentParser()
    sbq_db.add_connection_args(p)
    p.add_argument("--messages", type=int, default=3000)
    p.add_argument("--sessions", type=int, default=40)
    p.add_argument("--consumers", type=int, default=4)
    p.add_argument("--producers", type=int, default=2)
    p.add_argument("--timeout", type=int, default=240)
    p.add_argument("--hold", action="store_true",
                   help="hold a REPEATABLE READ transaction open for the whole run")
    return p.parse_args()


ARGS = parse_args()
LOCK = threading.Lock()
SENT = {}                      # seq -> session
HANDED = []                    # (session, seq, consumer, hand-out order within its accept)
HELD = []                      # (session, consumer, accepted at, released at, drained, handed out)
COMPLETED = collections.Counter()
ERRORS = []
PRODUCERS_DONE = threading.Event()


def connect(name):
    return sbq_db.connect(ARGS, application_name="sbq-sdrain-" + name)


def producer(pid):
    try:
        conn = connect("p%d" % pid)
        rnd = random.Random(pid)
        per = ARGS.messages // ARGS.producers
        n = 0
        while n < per:
            # each session has one producer, whose sends commit one after another:
            # their order is the session's order
            sid = "s%d" % (rnd.randrange(ARGS.sessions // ARGS.producers) * ARGS.producers + pid)
            k = min(rnd.choice([1, 1, 1, 3]), per - n)
            rows = conn.execute(
                "SELECT s FROM sbq_send_batch(%s, %s::text[], session_id => %s) s",
                (Q, ["p%d-%d" % (pid, n + i) for i in range(k)], sid)).fetchall()
            with LOCK:
                for (seq,) in rows:
                    SENT[seq] = sid
            n += k
            if rnd.random() < 0.3:
                time.sleep(0.002)
    except Exception as e:  # noqa: BLE001
        with LOCK:
            ERRORS.append("producer %d: %r" % (pid, e))


def receive_complete(conn, tok, n):
    """Receive up to n of the session's messages, then complete them: what came."""
    got = conn.execute("SELECT sequence_number, lock_token FROM sbq_receive_session(%s, %s, %s)",
                       (Q, tok, n)).fetchall()
    if got:
        conn.execute("SELECT sbq_complete(%s, %s::uuid[])", (Q, [g[1] for g in got]))
    return got


def consumer(cid):
    try:
        conn = connect("c%d" % cid)
        rnd = random.Random(100 + cid)
        deadline = time.time() + ARGS.timeout
        idle = 0
        while time.time() < deadline:
            row = conn.execute(
                "SELECT session_id, session_token, clock_timestamp() FROM sbq_accept_session(%s)",
                (Q,)).fetchone()
            if row is None:
                if PRODUCERS_DONE.is_set():
                    idle += 1
                    if idle > 20:
                        return
                time.sleep(0.01)
                continue
            idle = 0
            sid, tok, t_acc = row
            settled = PRODUCERS_DONE.is_set()    # every send committed before this accept
            early = rnd.random() < 0.1           # released after one batch, maybe not drained
            drained = False
            order = 0
            while True:
                n = rnd.choice([1, 2, 5])
                how = rnd.random()
                if how < 0.2:
                    # receive and complete in one transaction
                    with conn.transaction():
                        got = receive_complete(conn, tok, n)
                elif how < 0.4:
                    # receive and complete in one statement
                    got = conn.execute(
                        "SELECT m.sequence_number, m.lock_token FROM sbq_receive_session(%s, %s, %s) m,"
                        " LATERAL (SELECT sbq_complete(%s, m.lock_token)) c",
                        (Q, tok, n, Q)).fetchall()
                else:
                    got = receive_complete(conn, tok, n)
                with LOCK:
                    for seq, _ in got:
                        HANDED.append((sid, seq, cid, order))
                        order += 1
                        COMPLETED[seq] += 1
                if len(got) < n:
                    drained = settled
                    break
                if early:
                    break
            t_rel = conn.execute("SELECT clock_timestamp() FROM sbq_release_session(%s, %s)",
                                 (Q, tok)).fetchone()[0]
            with LOCK:
                HELD.append((sid, cid, t_acc, t_rel, drained, order))
    except Exception as e:  # noqa: BLE001
        with LOCK:
            ERRORS.append("consumer %d: %r" % (cid, e))


RESULTS = [0, 0]


def check(name, violations):
    ok = not violations
    RESULTS[0 if ok else 1] += 1
    print("%s %s" % ("ok  " if ok else "FAIL", name))
    for v in list(violations)[:5]:
        print("     %s" % (v,))


def main():
    admin = connect("admin")
    held = None
    if ARGS.hold:
        held = connect("held")
        held.autocommit = False
        held.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        held.execute("SELECT count(*) FROM sbq.sessions")
    admin.execute("SELECT sbq_create_queue(%s, requires_session => true, lock_duration => '1 minute')",
                  (Q,))
    threads = [threading.Thread(target=consumer, args=(i,)) for i in range(ARGS.consumers)]
    prods = [threading.Thread(target=producer, args=(i,)) for i in range(ARGS.producers)]
    for t in threads + prods:
        t.start()
    for t in prods:
        t.join()
    PRODUCERS_DONE.set()
    for t in threads:
        t.join()
    if held is not None:
        held.rollback()
        held.close()

    check("no client error", ERRORS)
    check("every send was completed exactly once (%d sent)" % len(SENT),
          ["seq %d: %d completions" % (s, COMPLETED.get(s, 0)) for s in SENT if COMPLETED.get(s, 0) != 1])
    check("nothing was completed that was not sent", [s for s in COMPLETED if s not in SENT])
    by_session = collections.defaultdict(list)
    for i, (sid, seq, cid, order) in enumerate(HANDED):
        by_session[sid].append((i, seq))
    out_of_order = []
    for sid, rows in by_session.items():
        seqs = [seq for _, seq in sorted(rows)]
        out_of_order += ["%s: %d after %d" % (sid, b, a) for a, b in zip(seqs, seqs[1:]) if b < a]
    check("within a session, messages were handed out in sending order", out_of_order)
    check("every hand-out was of its own session",
          ["seq %d handed out in %s, sent to %s" % (seq, sid, SENT.get(seq))
           for sid, seq, _, _ in HANDED if SENT.get(seq) != sid])
    overlaps = []
    by_held = collections.defaultdict(list)
    for sid, cid, a, r, settled, n in HELD:
        by_held[sid].append((a, r, cid, settled, n))
    for sid, iv in by_held.items():
        iv.sort()
        overlaps += ["%s: consumer %d from %s, consumer %d until %s" % (sid, i2[2], i2[0], i1[2], i1[1])
                     for i1, i2 in zip(iv, iv[1:]) if i2[0] < i1[1]]
    check("a session was held by one consumer at a time (%d accepts)" % len(HELD), overlaps)
    # once every send had committed, a drain that ended with a short receive left
    # the session empty: no later accept of it finds a message
    refound = []
    for sid, iv in by_held.items():
        drained = None
        for a, r, cid, settled, n in iv:
            if drained is not None and n > 0:
                refound.append("%s: drained by an accept at %s, %d more handed out at %s"
                               % (sid, drained, n, a))
            if settled:
                drained = a
    check("a session a receive found empty after the last send had nothing left", refound)
    left = admin.execute("SELECT count(*) FROM sbq_peek(%s, 100)", (Q,)).fetchone()[0]
    check("the queue is empty at the end", [] if left == 0 else ["%d messages left" % left])
    rows = admin.execute("SELECT count(*) FROM sbq_list_sessions(%s)", (Q,)).fetchone()[0]
    check("no session is left", [] if rows == 0 else ["%d sessions left" % rows])
    print("%d passed, %d failed" % tuple(RESULTS))
    return 1 if RESULTS[1] else 0


if __name__ == "__main__":
    sys.exit(main())
