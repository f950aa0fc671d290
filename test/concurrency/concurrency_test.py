#!/usr/bin/python3
"""
concurrency_test.py: producers and consumers on one sbqueue queue at the same time.

Each producer and consumer is a thread with its own connection (plus two "settler"
threads that complete lock tokens received by other connections, because tokens are
not bound to a connection). Everything that happens is logged with client-side
timestamps; afterwards the log is checked against the contract in API.md:

  * every committed send is completed exactly once, nothing is lost, no body appears
    that was never (or not durably) sent, bodies and sequence numbers round-trip;
  * a successful complete is always on the latest token handed out for the message,
    and settling a stale token (expired, rolled back, already settled) raises SB002,
    while settling a valid one never does; uuid[] complete is all or nothing;
  * locks on one message never overlap: it is handed out again only after the previous
    lock was abandoned or its locked_until (possibly renewed) passed;
  * delivery_count of the k-th committed hand-out is k (rolled-back receives don't count);
  * at the end the queue is empty and the counters of sbq_queue_stats match the log.

Usage:
  python3 test/concurrency/concurrency_test.py --host /tmp/sbq-conc --port 54402 \\
      --dbname sbq [--user postgres] [--messages 2000] [--consumers 4] [--producers 2]

Prints a summary and a last line "N passed, M failed"; exits 1 when a check fails.
Needs psycopg 3 (Debian: python3-psycopg). Everything is bounded by --timeout seconds.
"""

import argparse
import datetime
import json
import os
import queue as queuemod
import random
import sys
import tempfile
import threading
import time
import traceback
import uuid

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "harness"))
import sbq_db  # noqa: E402  (psycopg, or a run under Debian's python3 that has it)
from sbq_db import psycopg  # noqa: E402


# --------------------------------------------------------------------------- setup

def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[1])
    sbq_db.add_connection_args(p)
    p.add_argument("--messages", type=int, default=2000)
    p.add_argument("--consumers", type=int, default=4)
    p.add_argument("--producers", type=int, default=2)
    p.add_argument("--lock-duration", type=int, default=10,
                   help="queue lock duration in seconds (5..300); some locks are left to expire")
    p.add_argument("--timeout", type=float, default=120.0, help="overall time bound in seconds")
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--log", default=None, help="write the event log (JSON) here")
    p.add_argument("--keep", action="store_true", help="keep the queue afterwards")
    return p.parse_args()


ARGS = parse_args()
SEED = ARGS.seed if ARGS.seed is not None else random.randrange(1 << 30)
RUN = uuid.uuid4().hex[:10]
QUEUE = "conc-test-" + RUN
LOCK_S = float(ARGS.lock_duration)
T_START = time.time()
DEADLINE = T_START + ARGS.timeout
TOL = 0.35          # seconds of slack for comparing client and server time

# Fractions of the interesting paths.
P_ABANDON = 0.05    # abandon on first delivery
P_FORGET = 0.01     # on first delivery, neither settle nor renew: let the lock expire
P_RENEW = 0.03      # renew the lock before settling
P_SETTLER = 0.30    # hand the token to a settler thread (another connection)
P_BATCH = 0.35      # complete through this consumer's own uuid[] batch
P_RECHECK = 0.03    # after a successful complete, try the same token again (expect SB002)
P_RB_RECV = 0.02    # receive inside a transaction that rolls back
P_RB_SEND = 0.02    # send inside a transaction that rolls back


def connect(name):
    # Never let a statement outlive the test: 30 s each.
    return sbq_db.connect(ARGS, application_name="sbq-conc-" + name)


def now():
    return time.time()


class Shared:
    """Everything the threads share; the event log is appended under `lock`."""

    def __init__(self):
        self.lock = threading.Lock()
        self.sent = {}              # id -> {"body", "seq", "message_id", "kind", "producer"}
        self.rolled_back_sends = {}  # id -> body
        self.send_errors = []
        self.send_calls = []        # {"producer", "kind", "ids", "seqs"}
        self.receives = []          # committed peek-lock hand-outs, one per message
        self.receive_calls = []     # {"consumer", "k", "t0", "t1", "n", "seqs", "rolled_back"}
        self.rb_receives = []       # hand-outs of receives that were rolled back
        self.settles = []           # every settle attempt
        self.renews = []
        self.completed_ids = set()
        self.producers_done = 0
        self.last_activity = now()
        self.errors = []            # unexpected exceptions in threads
        self.stop = threading.Event()
        self.settle_q = queuemod.Queue()

    def log_settle(self, rec):
        with self.lock:
            self.settles.append(rec)


S = Shared()


def body_id(body):
    """The unique id a body carries: its first four '|' separated fields."""
    parts = bytes(body).split(b"|")
    if len(parts) < 5:
        return None
    return b"|".join(parts[:4]).decode("utf-8", "replace")


# ------------------------------------------------------------------------ producers

def make_body(pid, n, binary):
    ident = "sbq-conc|%s|%d|%d" % (RUN, pid, n)
    rnd = random.Random(hash((SEED, pid, n)))
    if binary:
        payload = bytes(b for b in rnd.randbytes(rnd.randrange(0, 300)) if b != 0x7C)
    else:
        payload = "".join(rnd.choice("abcdefghijklmnopqrstuvwxyzäöü€ 0123456789")
                          for _ in range(rnd.randrange(0, 200))).encode()
    return ident, ident.encode() + b"|" + payload


def producer(pid, count):
    rnd = random.Random(SEED * 31 + pid)
    name = "producer-%d" % pid
    conn = connect(name)
    n_id = 0        # identities handed out (rolled-back ones included, so all are unique)
    done = 0        # messages whose send committed
    try:
        while done < count and now() < DEADLINE and not S.stop.is_set():
            op = rnd.random()
            rollback = rnd.random() < P_RB_SEND
            if op < 0.30:
                kind, size = "single-text", 1
            elif op < 0.45:
                kind, size = "single-bytea", 1
            elif op < 0.75:
                kind, size = "batch-text", rnd.randint(2, 20)
            else:
                kind, size = "batch-bytea", rnd.randint(2, 20)
            if not rollback:
                size = min(size, count - done)
            batch = []      # (ident, body, kind, message_id)
            for i in range(size):
                ident, body = make_body(pid, n_id + i, kind.endswith("bytea"))
                batch.append((ident, body, kind, "mid-" + ident if kind.startswith("single") else None))
            n_id += size
            explicit = rollback or rnd.random() < 0.2
            try:
                if explicit:
                    with conn.transaction():
                        seqs = do_send(conn, kind, batch)
                        if rollback:
                            raise psycopg.Rollback()
                else:
                    seqs = do_send(conn, kind, batch)
            except psycopg.Error as e:
                with S.lock:
                    S.send_errors.append("%s %s: %s %s" % (name, kind, e.sqlstate, e))
                continue
            with S.lock:
                if rollback:
                    for ident, body, _, _ in batch:
                        S.rolled_back_sends[ident] = body
                else:
                    done += len(batch)
                    S.send_calls.append({"producer": name, "kind": kind,
                                         "ids": [b[0] for b in batch], "seqs": seqs})
                    for (ident, body, k, mid), seq in zip(batch, seqs):
                        S.sent[ident] = {"body": body, "seq": seq, "message_id": mid,
                                         "kind": k, "producer": name}
                S.last_activity = now()
    except Exception as e:      # noqa: BLE001 - record and let the checks fail
        with S.lock:
            S.errors.append("%s: %r\n%s" % (name, e, traceback.format_exc()))
    finally:
        with S.lock:
            S.producers_done += 1
        conn.close()


def do_send(conn, kind, batch):
    if kind == "single-text":
        ident, body, _, mid = batch[0]
        r = conn.execute("SELECT sbq_send(%s, %s::text, message_id => %s)",
                         (QUEUE, body.decode(), mid)).fetchone()
        return [r[0]]
    if kind == "single-bytea":
        ident, body, _, mid = batch[0]
        r = conn.execute("SELECT sbq_send(%s, %s::bytea, message_id => %s)",
                         (QUEUE, body, mid)).fetchone()
        return [r[0]]
    if kind == "batch-text":
        rows = conn.execute("SELECT s FROM sbq_send_batch(%s, %s::text[]) AS s",
                            (QUEUE, [b[1].decode() for b in batch])).fetchall()
    else:
        rows = conn.execute("SELECT s FROM sbq_send_batch(%s, %s::bytea[]) AS s",
                            (QUEUE, [b[1] for b in batch])).fetchall()
    seqs = [r[0] for r in rows]
    if len(seqs) != len(batch):
        raise RuntimeError("sbq_send_batch returned %d sequence numbers for %d bodies"
                           % (len(seqs), len(batch)))
    return seqs


# ------------------------------------------------------------------------ settling

def settle(conn, who, op, tokens, explicit=False):
    """One settle call; logs it and returns (ok, sqlstate, result)."""
    t0 = now()
    ok, state, result = True, None, None
    try:
        if explicit:
            with conn.transaction():
                result = settle_sql(conn, op, tokens)
        else:
            result = settle_sql(conn, op, tokens)
    except psycopg.Error as e:
        ok, state = False, e.sqlstate
        result = str(e).splitlines()[0] if str(e) else ""
    t1 = now()
    S.log_settle({"op": op, "tokens": [str(t) for t in tokens], "who": who, "t0": t0,
                  "t1": t1, "ok": ok, "sqlstate": state, "result": result})
    if ok and op in ("complete", "complete[]"):
        with S.lock:
            for t in tokens:
                ident = TOKEN_IDENT.get(str(t))
                if ident:
                    S.completed_ids.add(ident)
            S.last_activity = now()
    return ok, state, result


TOKEN_IDENT = {}    # token -> id of its message (filled by receivers before settling)


def settle_sql(conn, op, tokens):
    if op == "complete":
        conn.execute("SELECT sbq_complete(%s, %s::uuid)", (QUEUE, tokens[0]))
        return None
    if op == "complete[]":
        return conn.execute("SELECT sbq_complete(%s, %s::uuid[])",
                            (QUEUE, list(tokens))).fetchone()[0]
    if op == "abandon":
        conn.execute("SELECT sbq_abandon(%s, %s::uuid)", (QUEUE, tokens[0]))
        return None
    raise ValueError(op)


def settler(sid):
    """Completes tokens that consumers received on other connections."""
    rnd = random.Random(SEED * 7 + sid)
    name = "settler-%d" % sid
    conn = connect(name)
    try:
        while not S.stop.is_set() and now() < DEADLINE:
            try:
                first = S.settle_q.get(timeout=0.2)
            except queuemod.Empty:
                continue
            items = [first]
            while len(items) < 10:
                try:
                    items.append(S.settle_q.get_nowait())
                except queuemod.Empty:
                    break
            tokens = [it["token"] for it in items]
            probes = [t for t, it in zip(tokens, items) if it.get("probe")]
            fresh = [t for t, it in zip(tokens, items) if not it.get("probe")]
            # Re-completion probes of settled tokens: each alone, must fail.
            for t in probes:
                settle(conn, name, "complete", [t])
            if len(fresh) == 1:
                settle(conn, name, "complete", fresh, explicit=rnd.random() < 0.3)
            elif fresh:
                ok, state, _ = settle(conn, name, "complete[]", fresh,
                                      explicit=rnd.random() < 0.3)
                if not ok:
                    # All or nothing: nothing was completed, so each one can still be.
                    for t in fresh:
                        settle(conn, name, "complete", [t])
    except Exception as e:      # noqa: BLE001
        with S.lock:
            S.errors.append("%s: %r\n%s" % (name, e, traceback.format_exc()))
    finally:
        conn.close()


# ------------------------------------------------------------------------ consumers

RECV_SQL = ("SELECT sequence_number, message_id, lock_token, locked_until, delivery_count, "
            "body, state FROM sbq_receive(%s, max_messages => %s, max_wait => %s::interval)")


def consumer(cid):
    rnd = random.Random(SEED * 13 + cid)
    name = "consumer-%d" % cid
    conn = connect(name)
    stale = []      # (token, ident, not_before): expired or rolled-back tokens to try later
    try:
        while now() < DEADLINE and not S.stop.is_set():
            with S.lock:
                total_done = (S.producers_done == ARGS.producers
                              and S.completed_ids.issuperset(S.sent)
                              and S.settle_q.empty())
                idle = now() - S.last_activity
            if total_done and not stale:
                break
            if S.producers_done == ARGS.producers and idle > LOCK_S + 8 and not stale:
                break   # nothing happened for a while: lost messages, the checks will say
            k = rnd.randint(1, 10)
            rolled = rnd.random() < P_RB_RECV
            t0 = now()
            try:
                if rolled:
                    with conn.transaction():
                        rows = conn.execute(RECV_SQL, (QUEUE, k, "1 second")).fetchall()
                        raise psycopg.Rollback()
                else:
                    rows = conn.execute(RECV_SQL, (QUEUE, k, "1 second")).fetchall()
            except psycopg.Error as e:
                with S.lock:
                    S.errors.append("%s receive: %s %s" % (name, e.sqlstate, e))
                time.sleep(0.1)
                continue
            t1 = now()
            recs = []
            for r in rows:
                recs.append({"seq": r[0], "message_id": r[1], "token": str(r[2]),
                             "locked_until": r[3].timestamp() - OFFSET if r[3] else None,
                             "dc": r[4], "body": bytes(r[5]) if r[5] is not None else None,
                             "state": r[6], "ident": body_id(r[5]) if r[5] is not None else None,
                             "consumer": name, "t0": t0, "t1": t1, "renewed": []})
            with S.lock:
                S.receive_calls.append({"consumer": name, "k": k, "t0": t0, "t1": t1,
                                        "n": len(recs), "seqs": [x["seq"] for x in recs],
                                        "rolled_back": rolled})
                if rolled:
                    S.rb_receives.extend(recs)
                else:
                    S.receives.extend(recs)
                for x in recs:
                    TOKEN_IDENT[x["token"]] = x["ident"]
                if recs:
                    S.last_activity = now()
            fresh_stale = []
            if rolled:
                # Those locks never happened: the tokens must be refused (from the next
                # round on, so that they can spoil a batch of valid tokens).
                fresh_stale = [(x["token"], 0.0) for x in recs]
                recs = []
            own_batch = []
            for x in recs:
                tok = x["token"]
                first = x["dc"] == 1
                if first and rnd.random() < P_FORGET:
                    stale.append((tok, x["locked_until"] + 1.0))
                    continue
                if rnd.random() < P_RENEW:
                    t0r = now()
                    try:
                        lu = conn.execute("SELECT sbq_renew(%s, %s::uuid)",
                                          (QUEUE, tok)).fetchone()[0]
                        rec = {"token": tok, "t0": t0r, "t1": now(), "ok": True,
                               "locked_until": lu.timestamp() - OFFSET, "sqlstate": None}
                        x["renewed"].append(rec["locked_until"])
                    except psycopg.Error as e:
                        rec = {"token": tok, "t0": t0r, "t1": now(), "ok": False,
                               "locked_until": None, "sqlstate": e.sqlstate}
                    with S.lock:
                        S.renews.append(rec)
                if first and rnd.random() < P_ABANDON:
                    settle(conn, name, "abandon", [tok], explicit=rnd.random() < 0.3)
                    continue
                u = rnd.random()
                if u < P_SETTLER:
                    S.settle_q.put({"token": tok})
                elif u < P_SETTLER + P_BATCH:
                    own_batch.append(tok)
                else:
                    ok, _, _ = settle(conn, name, "complete", [tok],
                                      explicit=rnd.random() < 0.3)
                    if ok and rnd.random() < P_RECHECK:
                        S.settle_q.put({"token": tok, "probe": True})
            # Stale tokens whose time has come: alone, or spoiling this batch.
            due = [s for s in stale if now() > s[1]]
            stale = [s for s in stale if now() <= s[1]]
            stale.extend(fresh_stale)
            for tok, _ in due:
                if own_batch and rnd.random() < 0.7:
                    bad = own_batch + [tok]
                    rnd.shuffle(bad)
                    settle(conn, name, "complete[]", bad)
                    # Expected to fail as a whole; the valid ones follow below.
                else:
                    settle(conn, name, rnd.choice(["complete", "abandon"]), [tok])
            if len(own_batch) == 1:
                settle(conn, name, "complete", own_batch)
            elif own_batch:
                ok, _, _ = settle(conn, name, "complete[]", own_batch,
                                  explicit=rnd.random() < 0.3)
                if not ok:
                    for tok in own_batch:
                        settle(conn, name, "complete", [tok])
    except Exception as e:      # noqa: BLE001
        with S.lock:
            S.errors.append("%s: %r\n%s" % (name, e, traceback.format_exc()))
    finally:
        conn.close()


# ------------------------------------------------------------------------ checking

RESULTS = []    # (name, ok, detail)


def check(name, violations, info=""):
    """Record one check; `violations` is a list of strings (empty: passed)."""
    ok = not violations
    RESULTS.append((name, ok))
    if ok:
        print("ok   - %s%s" % (name, (" (" + info + ")") if info else ""))
    else:
        print("FAIL - %s: %d violation(s)" % (name, len(violations)))
        for v in violations[:8]:
            print("         " + v)
        if len(violations) > 8:
            print("         ... and %d more" % (len(violations) - 8))


def fmt_t(t):
    return "%.3f" % (t - T_START) if t is not None else "None"


def grant_key(r):
    """When the server granted a receive's lock, and its count as a tie-break."""
    granted = r["locked_until"] if r["locked_until"] is not None else r["t1"]
    return (granted, r["dc"])


def analyse(admin):
    sent = S.sent
    recs = S.receives
    by_ident = {}
    for r in recs:
        by_ident.setdefault(r["ident"], []).append(r)
    # Order the receives of a message by the server's grant time (locked_until
    # minus the lock duration, one clock for everybody), not by when a client
    # thread got round to noting its reply: under load a thread can note it late.
    for lst in by_ident.values():
        lst.sort(key=grant_key)
    by_token = {r["token"]: r for r in recs}
    rb_tokens = {r["token"] for r in S.rb_receives}

    # --- no unexpected exceptions in the threads
    check("no unexpected errors in producer/consumer threads",
          [e.splitlines()[0] for e in S.errors])

    # --- sends
    v = list(S.send_errors)
    all_seqs = [c for call in S.send_calls for c in call["seqs"]]
    if len(set(all_seqs)) != len(all_seqs):
        v.append("sequence numbers returned by sends are not unique")
    for call in S.send_calls:
        if call["seqs"] != sorted(call["seqs"]) or len(set(call["seqs"])) != len(call["seqs"]):
            v.append("%s %s returned sequence numbers not strictly increasing: %s"
                     % (call["producer"], call["kind"], call["seqs"]))
    if len(sent) != ARGS.messages:
        v.append("expected %d committed sends, have %d" % (ARGS.messages, len(sent)))
    check("sends succeed; sequence numbers unique and increasing in a batch", v,
          "%d messages, %d send calls, %d rolled back" %
          (len(sent), len(S.send_calls), len(S.rolled_back_sends)))

    # --- no body that was not sent
    v = []
    for r in recs + S.rb_receives:
        ident = r["ident"]
        if ident is None or not ident.startswith("sbq-conc|" + RUN + "|"):
            v.append("seq %s: body %r does not carry an id of this run" % (r["seq"], r["body"][:60]))
        elif ident in S.rolled_back_sends:
            v.append("seq %s: body %s was sent in a transaction that rolled back" % (r["seq"], ident))
        elif ident not in sent:
            v.append("seq %s: body %s was never sent" % (r["seq"], ident))
    check("no body received that was not (durably) sent", v)

    # --- body bytes, sequence number, message_id round-trip
    v = []
    for r in recs + S.rb_receives:
        s = sent.get(r["ident"])
        if not s:
            continue
        if r["body"] != s["body"]:
            v.append("%s: body differs: sent %r, received %r" % (r["ident"], s["body"][:60], r["body"][:60]))
        if r["seq"] != s["seq"]:
            v.append("%s: sbq_send returned sequence number %s, received as %s" % (r["ident"], s["seq"], r["seq"]))
        if s["message_id"] is not None and r["message_id"] != s["message_id"]:
            v.append("%s: message_id %r, expected %r" % (r["ident"], r["message_id"], s["message_id"]))
        if s["message_id"] is None:
            try:
                uuid.UUID(r["message_id"])
            except (TypeError, ValueError):
                v.append("%s: default message_id %r is not a UUID" % (r["ident"], r["message_id"]))
        if r["state"] != "active":
            v.append("%s: received message has state %r, expected 'active'" % (r["ident"], r["state"]))
        if r["token"] in (None, "None") or r["locked_until"] is None:
            v.append("%s: peek-lock receive without lock_token/locked_until" % r["ident"])
    for ident, lst in by_ident.items():
        mids = {r["message_id"] for r in lst}
        if len(mids) > 1:
            v.append("%s: message_id changed between deliveries: %s" % (ident, sorted(mids)))
    check("bodies, sequence numbers and message ids round-trip", v)

    # --- receive calls: at most k rows, lowest sequence first, bounded duration
    v = []
    for c in S.receive_calls:
        if c["n"] > c["k"]:
            v.append("%s received %d messages with max_messages %d" % (c["consumer"], c["n"], c["k"]))
        if c["seqs"] != sorted(c["seqs"]):
            v.append("%s at %s: one receive returned sequence numbers out of order: %s"
                     % (c["consumer"], fmt_t(c["t0"]), c["seqs"]))
        if c["t1"] - c["t0"] > 1.0 + 4.0:
            v.append("%s at %s: a receive with max_wait 1 s took %.2f s"
                     % (c["consumer"], fmt_t(c["t0"]), c["t1"] - c["t0"]))
    check("receive honours max_messages, order and max_wait", v,
          "%d receive calls" % len(S.receive_calls))

    # --- lock tokens unique, locked_until = receive time + lock_duration
    v = []
    toks = [r["token"] for r in recs + S.rb_receives]
    if len(set(toks)) != len(toks):
        v.append("%d lock tokens were handed out more than once" % (len(toks) - len(set(toks))))
    for r in recs:
        lu = r["locked_until"]
        if lu is None:
            continue
        if not (r["t0"] + LOCK_S - TOL <= lu <= r["t1"] + LOCK_S + TOL):
            v.append("seq %s: locked_until %s not within receive time [%s, %s] + %gs"
                     % (r["seq"], fmt_t(lu), fmt_t(r["t0"]), fmt_t(r["t1"]), LOCK_S))
    check("lock tokens unique; locked_until = receive time + lock_duration", v)

    # --- renew
    v = []
    for rn in S.renews:
        r = by_token.get(rn["token"])
        if not rn["ok"]:
            v.append("renew of a fresh token %s failed with %s" % (rn["token"], rn["sqlstate"]))
            continue
        if not (rn["t0"] + LOCK_S - TOL <= rn["locked_until"] <= rn["t1"] + LOCK_S + TOL):
            v.append("renew at %s returned locked_until %s, expected renew time + %gs"
                     % (fmt_t(rn["t0"]), fmt_t(rn["locked_until"]), LOCK_S))
        if r and rn["locked_until"] < r["locked_until"] - 0.001:
            v.append("renew moved locked_until back: %s -> %s" % (fmt_t(r["locked_until"]), fmt_t(rn["locked_until"])))
    check("renew extends the lock", v, "%d renews" % len(S.renews))

    # --- delivery_count
    v = []
    for ident, lst in by_ident.items():
        for i, r in enumerate(lst):
            if r["dc"] != i + 1:
                v.append("%s (seq %s): receive #%d by %s at %s reported delivery_count %s"
                         % (ident, r["seq"], i + 1, r["consumer"], fmt_t(r["t1"]), r["dc"]))
                break
    for r in S.rb_receives:
        prior = [x for x in by_ident.get(r["ident"], []) if grant_key(x) < grant_key(r)]
        if r["dc"] != len(prior) + 1:
            v.append("%s: rolled-back receive reported delivery_count %s after %d committed receives"
                     % (r["ident"], r["dc"], len(prior)))
    check("delivery_count = 1 + previous committed receives", v)

    # --- settle outcomes, token by token
    # When is each committed token released?  By a successful complete/abandon (its t0
    # at the earliest) or at its effective locked_until.
    settled_ok = {}     # token -> first successful settle record
    for s in sorted(S.settles, key=lambda s: s["t0"]):
        if s["ok"]:
            for t in s["tokens"]:
                settled_ok.setdefault(t, s)

    def eff_lu(r):
        return max([r["locked_until"]] + r["renewed"])

    def next_receive(r):
        lst = by_ident.get(r["ident"], [])
        i = lst.index(r)
        return lst[i + 1] if i + 1 < len(lst) else None

    def classify(tok, s):
        """'valid', 'invalid' or 'unknown' for a settle attempt s of tok."""
        if tok in rb_tokens:
            return "invalid", "token of a rolled-back receive"
        r = by_token.get(tok)
        if r is None:
            return "invalid", "unknown token"
        prev = settled_ok.get(tok)
        if prev is not None and prev is not s:
            if prev["t1"] < s["t0"]:
                return "invalid", "already settled by %s at %s" % (prev["who"], fmt_t(prev["t1"]))
            if prev["t0"] <= s["t1"]:
                return "unknown", ""
        if s["t0"] > eff_lu(r) + TOL:
            return "invalid", "lock expired at %s, settle at %s" % (fmt_t(eff_lu(r)), fmt_t(s["t0"]))
        nr = next_receive(r)
        if nr is not None and nr["t1"] < s["t0"]:
            return "invalid", "message received again at %s" % fmt_t(nr["t1"])
        if s["t1"] < eff_lu(r) - TOL and (nr is None or nr["t0"] > s["t1"]) and prev in (None, s):
            return "valid", ""
        return "unknown", ""

    spurious, accepted_stale, wrong_state, batch_v = [], [], [], []
    n_invalid = 0
    for s in S.settles:
        cls = [classify(t, s) for t in s["tokens"]]
        kinds = {c[0] for c in cls}
        what = "%s by %s at %s" % (s["op"], s["who"], fmt_t(s["t0"]))
        if "invalid" in kinds:
            n_invalid += 1
            if s["ok"]:
                bad = [(t, c[1]) for t, c in zip(s["tokens"], cls) if c[0] == "invalid"]
                accepted_stale.append("%s succeeded on %s (%s)" % (what, bad[0][0], bad[0][1]))
            elif s["sqlstate"] != "SB002":
                wrong_state.append("%s failed with %s, expected SB002: %s" % (what, s["sqlstate"], s["result"]))
        elif kinds == {"valid"}:
            if not s["ok"]:
                spurious.append("%s on %d valid token(s) failed: %s %s"
                                % (what, len(s["tokens"]), s["sqlstate"], s["result"]))
        if s["op"] == "complete[]" and s["ok"] and s["result"] != len(s["tokens"]):
            batch_v.append("%s returned %r for %d tokens" % (what, s["result"], len(s["tokens"])))
        if s["op"] == "complete[]" and not s["ok"] and "invalid" in kinds:
            # All or nothing: no token of the failed batch may count as completed by it,
            # and the valid ones must still be completable afterwards (checked through
            # "spurious" on their later single completes).
            pass
    check("settling a stale token (expired, rolled back, settled, superseded) fails",
          accepted_stale, "%d attempts with a stale token" % n_invalid)
    check("a stale token fails with SQLSTATE SB002", wrong_state)
    check("settling a valid token never fails (no spurious lock lost)", spurious)
    check("sbq_complete(uuid[]) returns the number of tokens", batch_v,
          "%d batch completes" % sum(1 for s in S.settles if s["op"] == "complete[]"))

    # --- atomicity of uuid[] complete: a failed batch completed nothing.  If it had,
    # the later single complete of a valid member would have failed with SB002.
    v = []
    mixed = 0
    for s in S.settles:
        if s["op"] != "complete[]" or s["ok"]:
            continue
        mixed += 1
        for t in s["tokens"]:
            r = by_token.get(t)
            if r is None or classify(t, s)[0] != "valid":
                continue
            later = [x for x in S.settles if t in x["tokens"] and x["t0"] > s["t1"]]
            if not any(x["ok"] for x in later):
                v.append("after failed %s by %s at %s, valid token %s (seq %s) could not be completed: %s"
                         % (s["op"], s["who"], fmt_t(s["t0"]), t, r["seq"],
                            [(x["op"], x["sqlstate"]) for x in later]))
    check("sbq_complete(uuid[]) is all or nothing", v, "%d failed batches" % mixed)

    # --- every committed message completed exactly once, on its latest token
    completes = {}      # ident -> list of (token, settle)
    for s in S.settles:
        if s["ok"] and s["op"] in ("complete", "complete[]"):
            for t in s["tokens"]:
                r = by_token.get(t)
                ident = r["ident"] if r else TOKEN_IDENT.get(t)
                completes.setdefault(ident, []).append((t, s))
    lost = [i for i in sent if i not in completes]
    v = ["%s (seq %s, %s) never completed; receives: %s"
         % (i, sent[i]["seq"], sent[i]["kind"],
            [(r["consumer"], fmt_t(r["t1"]), r["dc"]) for r in by_ident.get(i, [])]) for i in lost]
    check("no message lost: every committed send completed", v)
    v = ["%s completed %d times: %s" % (i, len(c), [(s["op"], s["who"], fmt_t(s["t0"])) for _, s in c])
         for i, c in completes.items() if len(c) > 1]
    check("every message completed exactly once", v)
    v = []
    for ident, c in completes.items():
        lst = by_ident.get(ident, [])
        for t, s in c:
            if not lst or lst[-1]["token"] != t:
                pos = [r["token"] for r in lst].index(t) + 1 if t in [r["token"] for r in lst] else None
                v.append("%s: completed with token #%s of %d handed out (by %s at %s)"
                         % (ident, pos, len(lst), s["who"], fmt_t(s["t0"])))
    check("a successful complete is on the latest token of the message", v)

    # --- locks never overlap
    v = []
    for ident, lst in by_ident.items():
        for a, b in zip(lst, lst[1:]):
            rel = settled_ok.get(a["token"])
            if rel is not None and rel["op"] == "abandon":
                if b["t1"] < rel["t0"]:
                    v.append("%s: received again by %s at %s before its abandon by %s at %s"
                             % (ident, b["consumer"], fmt_t(b["t1"]), rel["who"], fmt_t(rel["t0"])))
            elif rel is not None:
                v.append("%s: received again by %s at %s (delivery %s) after a successful %s by %s at %s"
                         % (ident, b["consumer"], fmt_t(b["t1"]), b["dc"], rel["op"], rel["who"], fmt_t(rel["t0"])))
            elif b["t1"] < eff_lu(a) - TOL:
                v.append("%s: received again by %s at %s while locked by %s until %s"
                         % (ident, b["consumer"], fmt_t(b["t1"]), a["consumer"], fmt_t(eff_lu(a))))
    check("no two valid locks on one message overlap", v,
          "%d messages delivered more than once" % sum(1 for l in by_ident.values() if len(l) > 1))

    # --- the queue is empty afterwards
    v = []
    rows = admin.execute("SELECT sequence_number FROM sbq_peek(%s, 100)", (QUEUE,)).fetchall()
    if rows:
        v.append("sbq_peek still returns %d message(s): seq %s" % (len(rows), [r[0] for r in rows][:10]))
    st = admin.execute("SELECT * FROM sbq_queue_stats WHERE lower(queue) = lower(%s)",
                       (QUEUE,)).fetchall()
    cols = None
    stats = None
    if len(st) != 1:
        v.append("sbq_queue_stats has %d rows for the queue" % len(st))
    else:
        cur = admin.execute("SELECT * FROM sbq_queue_stats WHERE lower(queue) = lower(%s)", (QUEUE,))
        cols = [d.name for d in cur.description]
        stats = dict(zip(cols, cur.fetchone()))
        for c in ("active_count", "locked_count", "deferred_count", "scheduled_count",
                  "dead_letter_count"):
            if stats.get(c) != 0:
                v.append("sbq_queue_stats.%s = %r, expected 0" % (c, stats.get(c)))
        if stats.get("oldest_enqueued_time") is not None:
            v.append("sbq_queue_stats.oldest_enqueued_time = %r on an empty queue"
                     % stats["oldest_enqueued_time"])
    rows = admin.execute("SELECT sequence_number FROM sbq_receive(%s, 10)", (QUEUE,)).fetchall()
    if rows:
        v.append("sbq_receive still returns messages: seq %s" % [r[0] for r in rows])
    check("the queue is empty at the end (peek, receive, stats counts)", v)

    # --- counters match the log
    v = []
    if stats is not None:
        n_completed = sum(len(s["tokens"]) for s in S.settles
                          if s["ok"] and s["op"] in ("complete", "complete[]"))
        n_abandoned = sum(1 for s in S.settles if s["ok"] and s["op"] == "abandon")
        expect = {"sent": len(sent), "received": len(recs), "completed": n_completed,
                  "abandoned": n_abandoned, "deferred": 0, "dead_lettered": 0, "expired": 0}
        for k, e in expect.items():
            if stats.get(k) != e:
                v.append("sbq_queue_stats.%s = %r, the log says %d" % (k, stats.get(k), e))
        print("     stats: " + ", ".join("%s=%s" % (k, stats.get(k)) for k in expect))
    else:
        v.append("no sbq_queue_stats row")
    check("sbq_queue_stats counters match the log", v)


def end_checks(admin):
    """Quiet-queue behaviour of max_wait, once the storm is over."""
    v = []
    t0 = now()
    rows = admin.execute(RECV_SQL, (QUEUE, 5, "0")).fetchall()
    d = now() - t0
    if rows or d > 0.5:
        v.append("max_wait 0 on an empty queue: %d rows after %.2f s" % (len(rows), d))
    t0 = now()
    rows = admin.execute(RECV_SQL, (QUEUE, 5, "1.5 seconds")).fetchall()
    d = now() - t0
    if rows or d < 1.4 or d > 4.0:
        v.append("max_wait 1.5 s on an empty queue: %d rows after %.2f s" % (len(rows), d))
    check("an empty queue: max_wait 0 returns at once, max_wait waits", v)

    # A send committed during a waiting receive ends the wait with that message.
    v = []
    other = connect("late-sender")
    body = ("sbq-conc|%s|late|0|x" % RUN).encode()

    def late():
        time.sleep(0.7)
        other.execute("SELECT sbq_send(%s, %s::text)", (QUEUE, body.decode()))

    th = threading.Thread(target=late)
    t0 = now()
    th.start()
    rows = admin.execute(RECV_SQL, (QUEUE, 5, "6 seconds")).fetchall()
    d = now() - t0
    th.join()
    other.close()
    if len(rows) != 1 or bytes(rows[0][5]) != body or rows[0][4] != 1:
        v.append("receive waiting 6 s got %r, expected the message sent after 0.7 s"
                 % [(r[0], bytes(r[5]), r[4]) for r in rows])
    elif d > 5.0 or d < 0.6:
        v.append("receive waiting 6 s for a send after 0.7 s returned after %.2f s" % d)
    else:
        admin.execute("SELECT sbq_complete(%s, %s::uuid)", (QUEUE, rows[0][2]))
    check("a waiting receive returns a message sent during the wait", v,
          "returned after %.2f s" % d)

    # A receive never waits for another session's uncommitted send or settle.
    v = []
    a, b = connect("holder-a"), connect("holder-b")
    try:
        body2 = "sbq-conc|%s|late|1|y" % RUN
        a.execute("SELECT sbq_send(%s, %s::text)", (QUEUE, body2))
        m = a.execute(RECV_SQL, (QUEUE, 1, "0")).fetchone()
        b.execute("BEGIN")
        b.execute("SELECT sbq_send(%s, %s::text)", (QUEUE, "sbq-conc|%s|late|2|z" % RUN))
        b.execute("SELECT sbq_abandon(%s, %s::uuid)", (QUEUE, m[2]))
        admin.execute("SET statement_timeout = '5s'")
        t0 = now()
        try:
            rows = admin.execute(RECV_SQL, (QUEUE, 5, "0")).fetchall()
            d = now() - t0
            if rows or d > 1.0:
                v.append("with an uncommitted send and abandon elsewhere, receive returned %d rows "
                         "after %.2f s; expected none at once" % (len(rows), d))
        except psycopg.Error as e:
            v.append("receive blocked by an uncommitted send/abandon: %s %s" % (e.sqlstate, e))
        b.execute("ROLLBACK")
        rows = admin.execute(RECV_SQL, (QUEUE, 5, "0")).fetchall()
        if rows:
            v.append("after the rollback of the abandon and the send, receive returned %d rows"
                     % len(rows))
        a.execute("SELECT sbq_complete(%s, %s::uuid)", (QUEUE, m[2]))
    except psycopg.Error as e:
        v.append("%s %s" % (e.sqlstate, e))
    finally:
        admin.execute("SET statement_timeout = '30s'")
        a.close()
        b.close()
    check("a receive does not wait for uncommitted sends or settles elsewhere", v)


def dump_log(path):
    def enc(o):
        if isinstance(o, bytes):
            return o.decode("utf-8", "replace")
        if isinstance(o, (uuid.UUID, datetime.datetime)):
            return str(o)
        return repr(o)
    with open(path, "w") as f:
        json.dump({"queue": QUEUE, "seed": SEED, "t_start": T_START, "offset": OFFSET,
                   "receives": S.receives, "rolled_back_receives": S.rb_receives,
                   "receive_calls": S.receive_calls, "settles": S.settles,
                   "renews": S.renews, "send_calls": S.send_calls,
                   "errors": S.errors}, f, default=enc, indent=0)


def main():
    global OFFSET
    print("sbqueue concurrency test: queue %s, %d messages, %d producers, %d consumers, "
          "lock %gs, seed %d" % (QUEUE, ARGS.messages, ARGS.producers, ARGS.consumers, LOCK_S, SEED))
    random.seed(SEED)
    admin = connect("admin")
    # Server clock minus client clock (usually ~0: same host).
    best = None
    for _ in range(5):
        t0 = now()
        srv = admin.execute("SELECT clock_timestamp()").fetchone()[0].timestamp()
        t1 = now()
        if best is None or t1 - t0 < best[0]:
            best = (t1 - t0, srv - (t0 + t1) / 2)
    OFFSET = best[1]
    admin.execute("SELECT sbq_create_queue(%s, lock_duration => %s::interval)",
                  (QUEUE, "%d seconds" % ARGS.lock_duration))
    ld = admin.execute("SELECT (sbq_get_queue(%s)).lock_duration", (QUEUE,)).fetchone()[0]
    if ld != datetime.timedelta(seconds=ARGS.lock_duration):
        print("warning: queue lock_duration is %s" % ld)

    threads = []
    per = [ARGS.messages // ARGS.producers + (1 if i < ARGS.messages % ARGS.producers else 0)
           for i in range(ARGS.producers)]
    for i in range(ARGS.consumers):
        threads.append(threading.Thread(target=consumer, args=(i,), daemon=True))
    for i in range(2):
        threads.append(threading.Thread(target=settler, args=(i,), daemon=True))
    for i in range(ARGS.producers):
        threads.append(threading.Thread(target=producer, args=(i, per[i]), daemon=True))
    for t in threads:
        t.start()
    consumers = threads[:ARGS.consumers]
    for t in consumers:
        t.join(max(0.0, DEADLINE - now()))
    # Consumers are done: let the settlers drain their queue, then stop everyone.
    while not S.settle_q.empty() and now() < DEADLINE:
        time.sleep(0.1)
    time.sleep(0.5)
    S.stop.set()
    for t in threads:
        t.join(max(0.0, DEADLINE + 5 - now()))
    timed_out = now() > DEADLINE or any(t.is_alive() for t in threads)
    elapsed = now() - T_START
    print("run took %.1f s: %d receives (%d calls), %d settle calls, %d renews"
          % (elapsed, len(S.receives), len(S.receive_calls), len(S.settles), len(S.renews)))

    check("the run finished within %gs" % ARGS.timeout,
          ["timed out after %.1f s; live threads: %s"
           % (elapsed, [t.name for t in threads if t.is_alive()])] if timed_out else [])
    analyse(admin)
    end_checks(admin)

    failed = [n for n, ok in RESULTS if not ok]
    log_path = ARGS.log
    if failed and not log_path:
        fd, log_path = tempfile.mkstemp(prefix="sbq-conc-", suffix=".json")
        os.close(fd)
    if log_path:
        dump_log(log_path)
        print("event log: %s" % log_path)
    if failed or ARGS.keep:
        print("queue %s kept for inspection" % QUEUE)
    else:
        admin.execute("SELECT sbq_delete_queue(%s)", (QUEUE,))
    admin.close()
    print("%d passed, %d failed" % (len(RESULTS) - len(failed), len(failed)))
    return 1 if failed else 0


OFFSET = 0.0

if __name__ == "__main__":
    try:
        sys.exit(main())
    except psycopg.Error as e:
        print("FAIL - database error outside the checks: %s %s" % (e.sqlstate, e))
        print("%d passed, %d failed" % (sum(1 for _, ok in RESULTS if ok),
                                        sum(1 for _, ok in RESULTS if not ok) + 1))
        sys.exit(1)
