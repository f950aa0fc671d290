#!/usr/bin/python3
"""
sbq_load.py: the history-recording client of sbqueue's fault tests.

Every operation it performs on the server is written to a JSON-lines history
file, Jepsen style: first an "invoke" line (so that an operation cut short by a
SIGKILL of this process is still known), then a completion line with the
outcome:

  ok       the call returned (for a write: its COMMIT was acknowledged)
  fail     the call certainly did not commit: the server raised an ERROR and
           the connection stayed usable, or the transaction was rolled back
  unknown  the connection died before the reply (it may or may not have
           committed)

Completion lines carry: id, client, op, t_invoke, t_complete (client wall
clock, epoch seconds), outcome, sqlstate, and per op:
  send      keys, md5s, seqs (sequence numbers returned)
  receive   max (max_messages), msgs [{seq, key, md5, token, dc, lu}]
  complete  tokens (one or more: a uuid[] complete is all or nothing)
  abandon   tokens (one)
The drain adds "meta" (the queue's properties), "dlq" (the dead-letter
sub-queue, peeked) and "remaining" (what the queue still holds) records.

Subcommands (all take --conninfo, --queue, --history):
  load     producers and consumers on their own connections for --duration s,
           reconnecting after every error; SIGTERM stops them cleanly
  send     send --count messages
  hold     receive --max messages once, then sleep until killed (F1)
  zombie   receive --max messages, then wait for --trigger to exist and
           complete every token (F2: SIGSTOP it in between)
  once     one receive, then --settle complete|abandon|none; prints the
           messages as JSON
  settle   complete or abandon each of --token (comma-separated) on a new
           connection; prints the outcomes
  drain    the final drain: wait until every lock could have expired, then
           receive and complete until three consecutive empty receives; then
           read the dead-letter sub-queue and what is left

Needs psycopg 3 (Debian: python3-psycopg).
"""

import argparse
import hashlib
import json
import os
import random
import signal
import sys
import threading
import time
import uuid

import sbq_db
from sbq_db import psycopg


def now():
    return time.time()


# ----------------------------------------------------------------------- history

class History:
    """Appends JSON lines to the history file; one write(2) per line, O_APPEND,
    so lines of concurrent writers (threads, other processes) never interleave
    and a SIGKILL loses nothing already written."""

    def __init__(self, path, client_prefix):
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self.lock = threading.Lock()
        self.n = 0
        self.prefix = "%s-%d-%s" % (client_prefix, os.getpid(), uuid.uuid4().hex[:6])

    def write(self, rec):
        line = (json.dumps(rec, separators=(",", ":"), sort_keys=True) + "\n").encode()
        with self.lock:
            os.write(self.fd, line)

    def new_id(self):
        with self.lock:
            self.n += 1
            return "%s-%d" % (self.prefix, self.n)

    def invoke(self, client, op, **kw):
        rec = {"ev": "invoke", "id": self.new_id(), "client": client, "op": op,
               "t_invoke": now()}
        rec.update(kw)
        self.write(rec)
        return rec

    def done(self, inv, outcome, sqlstate=None, **kw):
        rec = dict(inv)
        rec["ev"] = "done"
        rec["t_complete"] = now()
        rec["outcome"] = outcome
        rec["sqlstate"] = sqlstate
        rec.update(kw)
        self.write(rec)
        return rec


def classify(conn, exc):
    """fail when the server certainly rolled the call back, else unknown."""
    state = getattr(exc, "sqlstate", None)
    broken = conn is None or conn.closed or getattr(conn, "broken", False)
    if broken or state is None or state.startswith("08") or state.startswith("57P"):
        return "unknown", state
    return "fail", state


# ---------------------------------------------------------------------- the body

def make_body(key, poison, rnd):
    pad = "".join(rnd.choice("abcdefghijklmnopqrstuvwxyz0123456789") for _ in range(rnd.randrange(0, 120)))
    return json.dumps({"k": key, "poison": poison, "pad": pad}, separators=(",", ":"))


def md5(b):
    if isinstance(b, str):
        b = b.encode()
    return hashlib.md5(b).hexdigest()


def body_key(body):
    try:
        d = json.loads(bytes(body).decode())
        return d.get("k"), bool(d.get("poison"))
    except Exception:       # noqa: BLE001 - an unreadable body is reported as unexpected
        return None, False


RECV_SQL = ("SELECT sequence_number, lock_token, extract(epoch FROM locked_until)::float8, "
            "delivery_count, body FROM sbq_receive(%s, max_messages => %s, max_wait => %s::interval)")


def msg_rec(row):
    seq, token, lu, dc, body = row
    key, poison = body_key(body)
    return {"seq": seq, "key": key, "md5": md5(bytes(body)), "poison": poison,
            "token": str(token) if token is not None else None, "lu": lu, "dc": dc}


# ------------------------------------------------------------------ connections

class Client:
    """One connection that reconnects after every error, bounded by a deadline."""

    def __init__(self, args, name, hist, stop=None):
        self.args, self.name, self.hist = args, name, hist
        self.conn = None
        self.stop = stop or threading.Event()

    def connect(self, deadline):
        while self.conn is None:
            if now() > deadline or self.stop.is_set():
                raise TimeoutError("%s: could not connect" % self.name)
            try:
                self.conn = sbq_db.connect(conninfo=self.args.conninfo,
                                           statement_timeout=self.args.statement_timeout,
                                           connect_timeout=3,
                                           application_name="sbq-load-" + self.name)
            except psycopg.Error:
                time.sleep(0.2)
        return self.conn

    def drop(self):
        if self.conn is not None:
            try:
                self.conn.close()
            except Exception:       # noqa: BLE001
                pass
        self.conn = None

    def call(self, op, fn, deadline, rollback=False, **inv_kw):
        """Runs fn(conn) as one operation and records it. Returns (outcome, result)."""
        conn = self.connect(deadline)
        inv = self.hist.invoke(self.name, op, st=self.args.statement_timeout, **inv_kw)
        try:
            if rollback:
                with conn.transaction():
                    res, extra = fn(conn)
                    raise psycopg.Rollback()
            else:
                res, extra = fn(conn)
        except psycopg.Error as e:
            outcome, state = classify(conn, e)
            extra = {}
            if rollback:
                outcome = "fail"        # no COMMIT was ever sent
                extra["rolled_back"] = True
            self.hist.done(inv, outcome, state, error=str(e).splitlines()[0] if str(e) else "", **extra)
            self.drop()             # reconnect after every error
            return outcome, None
        if rollback:
            self.hist.done(inv, "fail", None, rolled_back=True, **extra)
            return "fail", res
        self.hist.done(inv, "ok", None, **extra)
        return "ok", res


# -------------------------------------------------------------------- operations

def op_send(client, queue, keys_bodies, deadline, rollback=False):
    keys = [k for k, _ in keys_bodies]
    md5s = [md5(b) for _, b in keys_bodies]

    def fn(conn):
        if len(keys_bodies) == 1:
            r = conn.execute("SELECT sbq_send(%s, %s::text)", (queue, keys_bodies[0][1])).fetchone()
            seqs = [r[0]]
        else:
            seqs = [r[0] for r in conn.execute("SELECT s FROM sbq_send_batch(%s, %s::text[]) AS s",
                                                (queue, [b for _, b in keys_bodies])).fetchall()]
        return seqs, {"seqs": seqs}

    return client.call("send", fn, deadline, rollback=rollback, keys=keys, md5s=md5s)


def op_receive(client, queue, maxn, wait, deadline, rollback=False):
    def fn(conn):
        rows = conn.execute(RECV_SQL, (queue, maxn, wait)).fetchall()
        msgs = [msg_rec(r) for r in rows]
        return msgs, {"msgs": msgs}

    return client.call("receive", fn, deadline, rollback=rollback, max=maxn)


def op_settle(client, queue, op, tokens, deadline):
    def fn(conn):
        if op == "abandon":
            conn.execute("SELECT sbq_abandon(%s, %s::uuid)", (queue, tokens[0]))
        elif len(tokens) == 1:
            conn.execute("SELECT sbq_complete(%s, %s::uuid)", (queue, tokens[0]))
        else:
            n = conn.execute("SELECT sbq_complete(%s, %s::uuid[])", (queue, tokens)).fetchone()[0]
            return n, {"count": n}
        return None, {}

    return client.call(op, fn, deadline, tokens=list(tokens))


# ------------------------------------------------------------------------- load

def producer(args, hist, idx, stop, deadline):
    rnd = random.Random(args.seed * 1000 + idx)
    c = Client(args, "p%d" % idx, hist, stop)
    n = 0
    while not stop.is_set() and now() < deadline:
        size = 1 if rnd.random() < 0.6 else rnd.randint(2, 5)
        batch = []
        for _ in range(size):
            key = "%s-p%d-%d" % (args.run, idx, n)
            n += 1
            poison = rnd.random() < args.poison
            batch.append((key, make_body(key, poison, rnd)))
        rollback = rnd.random() < 0.03
        try:
            op_send(c, args.queue, batch, deadline, rollback=rollback)
        except TimeoutError:
            break
        if args.send_delay:
            time.sleep(rnd.uniform(0, 2 * args.send_delay))
    c.drop()


def consumer(args, hist, idx, stop, deadline):
    rnd = random.Random(args.seed * 1000 + 500 + idx)
    c = Client(args, "c%d" % idx, hist, stop)
    mdc = args.max_delivery_count
    while not stop.is_set() and now() < deadline:
        try:
            rollback = rnd.random() < 0.02
            outcome, msgs = op_receive(c, args.queue, rnd.randint(1, 5), "0.5 seconds", deadline,
                                       rollback=rollback)
            if outcome != "ok" or not msgs:
                continue
            batch = []
            for m in msgs:
                if stop.is_set():
                    break       # leave the rest locked: their locks expire
                r = rnd.random()
                if m["poison"]:
                    # a poison message is never completed: abandoned, and on its
                    # last delivery either abandoned or left to expire (so that
                    # receive or the worker, not abandon, dead-letters half of them)
                    h = int(md5(m["key"] or "")[:4], 16)
                    if m["dc"] >= mdc and h % 2 == 0:
                        continue
                    op_settle(c, args.queue, "abandon", [m["token"]], deadline)
                    continue
                if r < args.p_forget:
                    continue                        # let the lock expire
                time.sleep(rnd.uniform(0, 0.02))    # "processing"
                if r < args.p_forget + args.p_abandon:
                    op_settle(c, args.queue, "abandon", [m["token"]], deadline)
                elif r < args.p_forget + args.p_abandon + args.p_slow:
                    # a slow consumer: settles after its lock ran out (must fail SB002)
                    time.sleep(args.lock_duration + 0.5)
                    op_settle(c, args.queue, "complete", [m["token"]], deadline)
                elif rnd.random() < 0.4:
                    batch.append(m["token"])
                else:
                    op_settle(c, args.queue, "complete", [m["token"]], deadline)
            if batch:
                outcome, _ = op_settle(c, args.queue, "complete", batch, deadline)
                if outcome == "fail" and len(batch) > 1:
                    for t in batch:         # all or nothing: each may still be completed
                        op_settle(c, args.queue, "complete", [t], deadline)
        except TimeoutError:
            break
    c.drop()


def cmd_load(args, hist):
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    deadline = now() + args.duration
    hard = deadline + args.statement_timeout + 5
    threads = [threading.Thread(target=producer, args=(args, hist, i, stop, hard), daemon=True)
               for i in range(args.producers)]
    threads += [threading.Thread(target=consumer, args=(args, hist, i, stop, hard), daemon=True)
                for i in range(args.consumers)]
    hist.write({"ev": "start", "client": "load", "t": now(), "pid": os.getpid(),
                "producers": args.producers, "consumers": args.consumers})
    for t in threads:
        t.start()
    while not stop.is_set() and now() < deadline:
        time.sleep(0.1)
    stop.set()
    for t in threads:
        t.join(max(0.1, hard - now()))
    hist.write({"ev": "stop", "client": "load", "t": now(),
                "alive": sum(1 for t in threads if t.is_alive())})
    return 0


# ----------------------------------------------------------------- single calls

def cmd_send(args, hist):
    rnd = random.Random(args.seed)
    c = Client(args, "send", hist)
    deadline = now() + args.timeout
    keys = []
    for i in range(args.count):
        key = "%s-s-%d" % (args.run, i)
        outcome, seqs = op_send(c, args.queue, [(key, make_body(key, False, rnd))], deadline)
        if outcome != "ok":
            print(json.dumps({"error": outcome}))
            return 1
        keys.append({"key": key, "seq": seqs[0]})
    print(json.dumps(keys))
    return 0


def cmd_hold(args, hist):
    c = Client(args, "hold", hist)
    outcome, msgs = op_receive(c, args.queue, args.max, "0", now() + args.timeout)
    print(json.dumps({"outcome": outcome, "msgs": msgs}), flush=True)
    while True:         # keep the connection, do nothing: the test kills us
        time.sleep(1)


def cmd_zombie(args, hist):
    c = Client(args, "zombie", hist)
    deadline = now() + args.timeout
    outcome, msgs = op_receive(c, args.queue, args.max, "0", deadline)
    print(json.dumps({"outcome": outcome, "msgs": msgs}), flush=True)
    while not os.path.exists(args.trigger) and now() < deadline:
        time.sleep(0.05)
    results = []
    for m in msgs or []:
        o, _ = op_settle(c, args.queue, "complete", [m["token"]], deadline)
        results.append(o)
    print(json.dumps({"settled": results}), flush=True)
    return 0


def cmd_once(args, hist):
    c = Client(args, "once", hist)
    deadline = now() + args.timeout
    if args.at is not None or args.not_after is not None:
        # connected first, then the receive at that instant: the caller times
        # the call itself, not this process's start
        c.connect(deadline)
    if args.at is not None:
        time.sleep(max(0.0, args.at - now()))
    t_call = now()
    if args.not_after is not None and t_call > args.not_after:
        # too late for what the caller asks of it (a loaded machine started
        # this process slowly): no call at all
        print(json.dumps({"outcome": "late", "msgs": [], "settled": [], "t_call": t_call}))
        return 0
    outcome, msgs = op_receive(c, args.queue, args.max, args.wait, deadline)
    settled = []
    if outcome == "ok" and msgs and args.settle != "none":
        for m in msgs:
            o, _ = op_settle(c, args.queue, args.settle, [m["token"]], deadline)
            settled.append(o)
    print(json.dumps({"outcome": outcome, "msgs": msgs or [], "settled": settled, "t_call": t_call}))
    return 0


def cmd_settle(args, hist):
    """Settles each of the comma-separated --token on one new connection, in turn."""
    c = Client(args, "settle", hist)
    res = []
    for token in args.token.split(","):
        c.connect(now() + args.timeout)
        inv = hist.invoke(c.name, args.settle, st=args.statement_timeout, tokens=[token])
        try:
            if args.settle == "abandon":
                c.conn.execute("SELECT sbq_abandon(%s, %s::uuid)", (args.queue, token))
            else:
                c.conn.execute("SELECT sbq_complete(%s, %s::uuid)", (args.queue, token))
            hist.done(inv, "ok")
            res.append({"outcome": "ok", "sqlstate": None})
        except psycopg.Error as e:
            outcome, state = classify(c.conn, e)
            hist.done(inv, outcome, state, error=str(e).splitlines()[0] if str(e) else "")
            res.append({"outcome": outcome, "sqlstate": state})
            c.drop()
    print(json.dumps(res))
    return 0


# ------------------------------------------------------------------------ drain

def cmd_drain(args, hist):
    """The final drain over a new connection."""
    deadline = now() + args.timeout
    c = Client(args, "drain", hist)
    conn = c.connect(deadline)
    q = conn.execute("SELECT extract(epoch FROM lock_duration)::float8, max_delivery_count "
                     "FROM sbq_get_queue(%s)", (args.queue,)).fetchone()
    lock_s, mdc = q
    hist.write({"ev": "meta", "client": "drain", "t": now(), "queue": args.queue,
                "lock_duration": lock_s, "max_delivery_count": mdc})
    # 1. wait until every lock could have expired: a lock taken by a call still
    # in flight when the load stopped lasts lock_duration from its grant
    t_wait = now() + lock_s + 0.5
    while now() < deadline:
        lu = conn.execute("SELECT extract(epoch FROM max(locked_until))::float8 "
                          "FROM sbq_peek(%s, 5000)", (args.queue,)).fetchone()[0]
        if now() >= t_wait and (lu is None or lu < now() - 0.2):
            break
        time.sleep(0.2)
    # 2. receive and complete until three consecutive empty receives
    empty = 0
    while empty < 3 and now() < deadline:
        outcome, msgs = op_receive(c, args.queue, 50, "0.3 seconds", deadline)
        if outcome != "ok":
            continue
        if not msgs:
            empty += 1
            continue
        empty = 0
        for m in msgs:
            op_settle(c, args.queue, "complete", [m["token"]], deadline)
    # 3. the dead-letter sub-queue and what is left, by peek (changes nothing)
    conn = c.connect(deadline)
    for what, qn in (("dlq", args.queue + "/$deadletterqueue"), ("remaining", args.queue)):
        msgs, frm = [], None
        while True:
            rows = conn.execute(
                "SELECT sequence_number, delivery_count, dead_letter_reason, state, body, "
                "extract(epoch FROM locked_until)::float8 "
                "FROM sbq_peek(%s, 1000, %s)", (qn, frm)).fetchall()
            for seq, dc, reason, state, body, lu in rows:
                key, _ = body_key(body)
                msgs.append({"seq": seq, "dc": dc, "reason": reason, "state": state,
                             "key": key, "md5": md5(bytes(body)), "lu": lu})
            if len(rows) < 1000:
                break
            frm = rows[-1][0] + 1
        hist.write({"ev": what, "client": "drain", "t": now(), "msgs": msgs})
    ok = empty >= 3
    hist.write({"ev": "drained", "client": "drain", "t": now(), "complete": ok})
    print(json.dumps({"drained": ok}))
    return 0 if ok else 1


# ------------------------------------------------------------------------- main

def main():
    p = argparse.ArgumentParser(description="sbqueue fault-test client")
    p.add_argument("command", choices=["load", "send", "hold", "zombie", "once", "settle", "drain"])
    p.add_argument("--conninfo", required=True)
    p.add_argument("--queue", required=True)
    p.add_argument("--history", required=True)
    p.add_argument("--run", default=None, help="prefix of message keys (unique per run)")
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--duration", type=float, default=20)
    p.add_argument("--timeout", type=float, default=60)
    p.add_argument("--statement-timeout", type=int, default=10)
    p.add_argument("--producers", type=int, default=2)
    p.add_argument("--consumers", type=int, default=3)
    p.add_argument("--send-delay", type=float, default=0.01)
    p.add_argument("--lock-duration", type=float, default=5)
    p.add_argument("--max-delivery-count", type=int, default=3)
    p.add_argument("--poison", type=float, default=0.03)
    p.add_argument("--p-forget", type=float, default=0.03)
    p.add_argument("--p-abandon", type=float, default=0.10)
    p.add_argument("--p-slow", type=float, default=0.003)
    p.add_argument("--count", type=int, default=10)
    p.add_argument("--max", type=int, default=1)
    p.add_argument("--wait", default="0")
    p.add_argument("--at", type=float, default=None,
                   help="once: connect, then receive at this time (seconds since the epoch)")
    p.add_argument("--not-after", type=float, default=None,
                   help="once: connect, then receive only if not later than this time")
    p.add_argument("--settle", default="complete", choices=["complete", "abandon", "none"])
    p.add_argument("--token")
    p.add_argument("--trigger")
    args = p.parse_args()
    if args.seed is None:
        args.seed = random.randrange(1 << 30)
    if args.run is None:
        args.run = uuid.uuid4().hex[:8]
    hist = History(args.history, args.command)
    return {"load": cmd_load, "send": cmd_send, "hold": cmd_hold, "zombie": cmd_zombie,
            "once": cmd_once, "settle": cmd_settle, "drain": cmd_drain}[args.command](args, hist)


if __name__ == "__main__":
    sys.exit(main())
