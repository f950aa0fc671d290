#!/usr/bin/python3
"""
sbq_check.py: checks a history written by sbq_load.py (plus the fault events a
test appends) against sbqueue's invariants I1-I6, and prints a Jepsen-style
summary. Exits 0 when the history is valid, 1 on a violation, 2 on bad input.

  sbq_check.py [--json OUT] HISTORY [HISTORY...]
  sbq_check.py --fabricate DIR      writes good.jsonl and bad histories to DIR

One history covers one queue and must end with a drain (sbq_load.py drain).
Fault events are lines {"ev": "crash", "t_start": T0, "t_end": T1, "what": ...}:
a server crash, immediate stop or failover somewhere in [T0, T1]. API.md allows
a crash to lose locks (as if expired) and the count of the deliveries whose
locks it lost, at most one per message per crash; the checker grants exactly
that much, and only across a crash.

Times are client wall-clock seconds. The server runs on the same host, so its
clock (locked_until) is comparable, within TOL seconds.

The invariants (see test/harness/README.md):
  I1 every send acknowledged ok is found exactly once among completed, still
     queued and dead letters (lost / found twice)
  I2 every delivered body was sent, byte-identical, with the sequence number its
     send returned (unexpected); an unknown send found is "recovered"
  I3 no two successful receives of one message hold overlapping lock windows
     unless the earlier was settled first; a settle on an expired or replaced
     token never succeeds, one on a certainly valid token never fails SB002
  I4 at most one successful complete per message; no receive of a message
     after its successful complete
  I5 the delivery_count of successive committed receives of a message is
     1, 2, 3, ...; a step may skip only by receives whose outcome is unknown
     (each counted at most once per message and up to its max_messages in
     total) and go back only by the crashes between the two receives
  I6 a dead letter with reason MaxDeliveryCountExceeded has delivery_count =
     max_delivery_count; no delivery reports more
"""

import argparse
import json
import math
import os
import sys

TOL = 0.25
INF = math.inf
SETTLE_OPS = ("complete", "abandon")
# The only error a call of the load may end with while its connection
# survives: lock lost, on a settle (connection failures are "unknown", not
# "fail"). Anything else (a statement timeout, a deadlock, an internal error,
# 25006 from a server that should be writable) is reported.
OK_ERRORS = {"SB002"}


def load(paths):
    recs = []
    for p in paths:
        with open(p) as f:
            for n, line in enumerate(f, 1):
                line = line.strip()
                if not line:
                    continue
                try:
                    recs.append(json.loads(line))
                except ValueError:
                    # a line cut short by a SIGKILL can only be the last one
                    raise SystemExit("%s:%d: not JSON: %r" % (p, n, line[:80]))
    return recs


class Checker:
    def __init__(self, recs):
        self.v = {}         # category -> list of messages
        self.stats = {}
        self.recs = recs

    def bad(self, cat, msg):
        self.v.setdefault(cat, []).append(msg)

    def run(self):
        recs = self.recs
        invokes, dones = {}, {}
        self.crashes, self.dlq, self.remaining, meta, drained = [], None, None, None, None
        for r in recs:
            ev = r.get("ev")
            if ev == "invoke":
                invokes[r["id"]] = r
            elif ev == "done":
                dones[r["id"]] = r
            elif ev == "crash":
                self.crashes.append((r["t_start"], r["t_end"], r.get("what", "")))
            elif ev == "meta":
                meta = r
            elif ev == "dlq":
                self.dlq = r["msgs"]
            elif ev == "remaining":
                self.remaining = r["msgs"]
            elif ev == "drained":
                drained = r
        if meta is None or self.dlq is None or self.remaining is None or drained is None:
            self.bad("history", "the history has no complete final drain (meta/dlq/remaining/drained)")
            meta = meta or {"max_delivery_count": 10, "lock_duration": 30}
            self.dlq = self.dlq or []
            self.remaining = self.remaining or []
        elif not drained.get("complete"):
            self.bad("history", "the final drain did not reach three consecutive empty receives")
        self.mdc = meta["max_delivery_count"]
        ops = []
        for i, inv in invokes.items():
            d = dones.get(i)
            if d is None:
                # cut short by a kill of the client: the backend ends the statement
                # (and so its transaction) within statement_timeout
                d = dict(inv)
                d.update(outcome="unknown", t_complete=inv["t_invoke"] + inv.get("st", 10) + 1,
                         sqlstate=None, cut=True)
            ops.append(d)
        for i, d in dones.items():
            if i not in invokes:
                ops.append(d)
        ops.sort(key=lambda o: (o["t_invoke"], o["id"]))
        self.ops = ops
        self.index()
        self.check_errors()
        self.check_i1_i2()
        self.check_i3()
        self.check_i4()
        self.check_i5()
        self.check_i6()
        self.collect_stats()
        return not self.v

    # ------------------------------------------------------------------ index
    def index(self):
        self.sends = {}             # key -> (op, position)
        self.receives = []          # every receive op
        self.ok_recv = {}           # key -> [(op, msg)] of ok receives
        self.token = {}             # token -> (op, msg)
        self.settles = {}           # token -> [settle op]
        for o in self.ops:
            if o["op"] == "send":
                for i, k in enumerate(o.get("keys", [])):
                    if k in self.sends:
                        raise SystemExit("key %s sent twice: the load client must not reuse keys" % k)
                    self.sends[k] = (o, i)
            elif o["op"] == "receive":
                self.receives.append(o)
                if o["outcome"] == "ok":
                    for m in o.get("msgs", []):
                        self.ok_recv.setdefault(m["key"], []).append((o, m))
                        if m.get("token"):
                            self.token[m["token"]] = (o, m)
            elif o["op"] in SETTLE_OPS:
                for t in o.get("tokens", []):
                    self.settles.setdefault(t, []).append(o)
        # in the order of the grants: a lock is handed on only after the previous
        # holder's reply (it settles with the token the reply carried, or its lock
        # expires after the reply), so the replies come in grant order; the
        # invocations need not (a receive may wait with max_wait)
        for lst in self.ok_recv.values():
            lst.sort(key=lambda x: (x[0]["t_complete"], x[0]["t_invoke"]))

    def crashes_between(self, t0, t1):
        """Crashes that may have happened after t0 and before t1."""
        return [c for c in self.crashes if c[0] < t1 and c[1] > t0]

    def completes_of_key(self, key, outcomes=("ok",)):
        res = []
        for o, m in self.ok_recv.get(key, []):
            for s in self.settles.get(m["token"], []):
                if s["op"] == "complete" and s["outcome"] in outcomes and s not in res:
                    res.append(s)
        return res

    # ----------------------------------------------------------------- errors
    def check_errors(self):
        for o in self.ops:
            if o["outcome"] != "fail" or o.get("rolled_back"):
                continue
            st = o.get("sqlstate")
            if st in OK_ERRORS and (st != "SB002" or o["op"] in SETTLE_OPS):
                continue
            self.bad("unexpected-error", "%s by %s at %.3f failed with %s: %s"
                     % (o["op"], o["client"], o["t_invoke"], st, o.get("error", "")))

    # ------------------------------------------------------------- I1 and I2
    def check_i1_i2(self):
        found = {}              # key -> list of places
        observed = []           # (where, key, md5, seq)
        for key, lst in self.ok_recv.items():
            for o, m in lst:
                observed.append(("receive by %s at %.3f" % (o["client"], o["t_invoke"]), key, m["md5"], m["seq"]))
        for o in self.receives:
            if o["outcome"] == "fail":      # rolled back: what it saw still had to be sent
                for m in o.get("msgs", []):
                    observed.append(("rolled-back receive by %s" % o["client"], m["key"], m["md5"], m["seq"]))
        for m in self.dlq:
            observed.append(("dead-letter sub-queue", m["key"], m["md5"], None))
            found.setdefault(m["key"], []).append("dead letter (seq %s)" % m["seq"])
        for m in self.remaining:
            observed.append(("queue after the drain", m["key"], m["md5"], m["seq"]))
            found.setdefault(m["key"], []).append("still queued (seq %s, %s)" % (m["seq"], m["state"]))
        # I2: everything observed was sent (ok or unknown), byte-identical
        recovered = set()
        for where, key, h, seq in observed:
            s = self.sends.get(key)
            if s is None:
                self.bad("I2 unexpected", "%s: key %r was never sent" % (where, key))
                continue
            so, i = s
            if so["outcome"] == "fail":
                self.bad("I2 unexpected", "%s: key %s whose send failed/rolled back (%s)"
                         % (where, key, so.get("sqlstate") or "rollback"))
            elif so["md5s"][i] != h:
                self.bad("I2 unexpected", "%s: key %s body differs from what was sent" % (where, key))
            elif so["outcome"] == "ok" and seq is not None and so["seqs"][i] != seq:
                self.bad("I2 unexpected", "%s: key %s has sequence number %s, its send returned %s"
                         % (where, key, seq, so["seqs"][i]))
            if so["outcome"] == "unknown":
                recovered.add(key)
        self.recovered = recovered
        # I1: every acknowledged send is found exactly once
        self.lost, self.completed_by_unknown = [], 0
        for key, (so, i) in self.sends.items():
            places = list(found.get(key, []))
            if self.completes_of_key(key):
                places.insert(0, "completed")
            if so["outcome"] != "ok":
                if len(places) > 1:
                    self.bad("I1 found twice", "key %s (send %s) found %d times: %s"
                             % (key, so["outcome"], len(places), places))
                continue
            if not places:
                if self.completes_of_key(key, ("unknown",)):
                    self.completed_by_unknown += 1      # a complete of unknown outcome took it
                    continue
                self.lost.append(key)
                recv = [(m["dc"], round(o["t_invoke"], 3)) for o, m in self.ok_recv.get(key, [])]
                self.bad("I1 lost", "key %s (seq %s, acknowledged at %.3f) is neither completed, "
                         "queued nor dead-lettered; receives (dc, t): %s"
                         % (key, so["seqs"][i], so["t_complete"], recv))
            elif len(places) > 1:
                self.bad("I1 found twice", "key %s found %d times: %s" % (key, len(places), places))

    # -------------------------------------------------------------------- I3
    def window(self, o, m):
        """Where the lock was certainly held: from the reply until the earliest of
        locked_until and the first settle that may have released it."""
        end = m["lu"] - TOL if m["lu"] is not None else -INF
        for s in self.settles.get(m["token"], []):
            if s["outcome"] in ("ok", "unknown"):
                end = min(end, s["t_invoke"])
        return o["t_complete"], end

    def check_i3(self):
        self.overlaps = 0
        for key, lst in self.ok_recv.items():
            for a_i in range(len(lst)):
                for b_i in range(a_i + 1, len(lst)):
                    (ao, am), (bo, bm) = lst[a_i], lst[b_i]
                    a0, a1 = self.window(ao, am)
                    b0, b1 = self.window(bo, bm)
                    if max(a0, b0) >= min(a1, b1):
                        continue
                    if self.crashes_between(min(ao["t_invoke"], bo["t_invoke"]),
                                            max(ao["t_complete"], bo["t_complete"])):
                        continue        # a crash may lose locks (API.md)
                    self.overlaps += 1
                    self.bad("I3 lease overlap",
                             "key %s: %s held a lock (dc %s) until %.3f; %s got it again (dc %s) at %.3f"
                             % (key, ao["client"], am["dc"], am["lu"], bo["client"], bm["dc"], bo["t_complete"]))
        # settles against the token's validity
        for t, ss in self.settles.items():
            r = self.token.get(t)
            oks = [s for s in ss if s["outcome"] == "ok"]
            if r is None:
                for s in oks:
                    self.bad("I3 stale settle", "%s by %s of token %s succeeded, but no successful receive "
                             "handed that token out" % (s["op"], s["client"], t))
                continue
            ro, rm = r
            if len(oks) > 1:
                self.bad("I3 stale settle", "token %s (key %s) settled successfully %d times: %s"
                         % (t, rm["key"], len(oks), [(s["op"], s["client"]) for s in oks]))
            later = [o for o, m in self.ok_recv.get(rm["key"], [])
                     if o["t_invoke"] > ro["t_complete"] and m["token"] != t]
            for s in ss:
                if s["outcome"] == "ok":
                    if s["t_invoke"] > rm["lu"] + TOL:
                        self.bad("I3 stale settle", "%s by %s of key %s at %.3f succeeded on a lock that "
                                 "expired at %.3f" % (s["op"], s["client"], rm["key"], s["t_invoke"], rm["lu"]))
                    for o in later:
                        if o["t_complete"] < s["t_invoke"] and not self.crashes_between(o["t_invoke"], s["t_complete"]):
                            self.bad("I3 stale settle", "%s by %s of key %s at %.3f succeeded with token %s, "
                                     "replaced by %s's receive at %.3f"
                                     % (s["op"], s["client"], rm["key"], s["t_invoke"], t, o["client"], o["t_complete"]))
                elif s["outcome"] == "fail" and s.get("sqlstate") == "SB002":
                    others = [x for x in ss if x is not s and x["outcome"] in ("ok", "unknown")
                              and x["t_invoke"] < s["t_complete"]]
                    if (s["t_invoke"] >= ro["t_complete"] and s["t_complete"] < rm["lu"] - TOL
                            and not others and not self.crashes_between(ro["t_invoke"], s["t_complete"])
                            and len(s["tokens"]) == 1):
                        self.bad("I3 spurious lock lost", "%s by %s of key %s at %.3f failed SB002 on a lock "
                                 "valid until %.3f" % (s["op"], s["client"], rm["key"], s["t_invoke"], rm["lu"]))

    # -------------------------------------------------------------------- I4
    def check_i4(self):
        self.double = 0
        for key in self.ok_recv:
            oks = self.completes_of_key(key)
            if len(oks) > 1:
                self.double += 1
                self.bad("I4 double complete", "key %s completed successfully %d times: %s"
                         % (key, len(oks), [(s["client"], round(s["t_invoke"], 3)) for s in oks]))
            if oks:
                first = min(s["t_complete"] for s in oks)
                for o, m in self.ok_recv[key]:
                    if o["t_invoke"] > first:
                        self.bad("I4 delivered after complete", "key %s received by %s at %.3f (dc %s) after "
                                 "its complete was acknowledged at %.3f"
                                 % (key, o["client"], o["t_invoke"], m["dc"], first))

    # -------------------------------------------------------------------- I5
    def check_i5(self):
        slots = []      # (key, description, candidate unknown receives)
        unknown = [o for o in self.receives if o["outcome"] == "unknown"]
        self.wrong_counts = 0
        for key, lst in self.ok_recv.items():
            s = self.sends.get(key)
            if s is None:
                continue        # I2 already said so
            so = s[0]
            prev_dc, p0 = 0, so["t_invoke"]
            for o, m in lst:
                delta = m["dc"] - prev_dc - 1
                c = len(self.crashes_between(p0, o["t_complete"]))
                if delta < -c:
                    self.wrong_counts += 1
                    self.bad("I5 delivery count", "key %s: delivery_count %s by %s at %.3f after %s "
                             "(%d crash(es) in between)" % (key, m["dc"], o["client"], o["t_invoke"], prev_dc, c))
                for j in range(max(0, delta)):
                    cands = [u for u in unknown if u["t_invoke"] < o["t_complete"] and u["t_complete"] > p0]
                    slots.append((key, "key %s: delivery_count %s by %s at %.3f after %s"
                                  % (key, m["dc"], o["client"], o["t_invoke"], prev_dc), cands))
                prev_dc, p0 = m["dc"], o["t_invoke"]
        # each skipped count needs its own receive of unknown outcome: at most one
        # per message per receive, at most max_messages per receive
        unmatched = self.match(slots)
        for key, desc, cands in unmatched:
            self.wrong_counts += 1
            self.bad("I5 delivery count", desc + " (a count skipped, and no receive of unknown outcome "
                     "is left to explain it; %d candidate(s))" % len(cands))

    @staticmethod
    def match(slots):
        """Max flow: source -1-> slot -1-> (receive, key) -1-> receive -max-> sink.
        Returns the slots left without a receive."""
        cap = {}

        def add(a, b, c):
            cap.setdefault(a, {}).setdefault(b, 0)
            cap[a][b] += c
            cap.setdefault(b, {}).setdefault(a, 0)

        for si, (key, _, cands) in enumerate(slots):
            add("S", ("slot", si), 1)
            for u in cands:
                add(("slot", si), ("pair", u["id"], key), 1)
                if ("recv", u["id"]) not in cap.get(("pair", u["id"], key), {}):
                    add(("pair", u["id"], key), ("recv", u["id"]), 1)
                if "T" not in cap.get(("recv", u["id"]), {}):
                    add(("recv", u["id"]), "T", u.get("max") or 1)
        while True:         # Edmonds-Karp: shortest augmenting paths, unit steps
            prev, frontier = {"S": None}, ["S"]
            while frontier and "T" not in prev:
                nxt = []
                for a in frontier:
                    for b, c in cap.get(a, {}).items():
                        if c > 0 and b not in prev:
                            prev[b] = a
                            nxt.append(b)
                frontier = nxt
            if "T" not in prev:
                break
            b = "T"
            while prev[b] is not None:
                a = prev[b]
                cap[a][b] -= 1
                cap[b][a] += 1
                b = a
        return [slots[si] for si in range(len(slots)) if cap["S"][("slot", si)] > 0]

    # -------------------------------------------------------------------- I6
    def check_i6(self):
        for m in self.dlq:
            if m["reason"] == "MaxDeliveryCountExceeded":
                if m["dc"] != self.mdc:
                    self.bad("I6 DLQ boundary", "dead letter %s (seq %s) has delivery_count %s, "
                             "max_delivery_count is %s" % (m["key"], m["seq"], m["dc"], self.mdc))
            else:
                self.bad("I6 DLQ boundary", "dead letter %s (seq %s) with reason %r: the load sets no "
                         "time to live and dead-letters nothing by hand" % (m["key"], m["seq"], m["reason"]))
        for key, lst in self.ok_recv.items():
            for o, m in lst:
                if m["dc"] > self.mdc:
                    self.bad("I6 DLQ boundary", "key %s delivered by %s at %.3f with delivery_count %s > "
                             "max_delivery_count %s" % (key, o["client"], o["t_invoke"], m["dc"], self.mdc))

    # ------------------------------------------------------------------ stats
    def collect_stats(self):
        st = self.stats
        for what in ("ok", "unknown", "fail"):
            st["sent_" + what] = sum(1 for s, _ in self.sends.values() if s["outcome"] == what)
            st["receives_" + what] = sum(1 for o in self.receives if o["outcome"] == what)
            st["settles_" + what] = sum(1 for o in self.ops if o["op"] in SETTLE_OPS and o["outcome"] == what)
        st["settles_sb002"] = sum(1 for o in self.ops if o["op"] in SETTLE_OPS and o.get("sqlstate") == "SB002")
        st["deliveries"] = sum(len(l) for l in self.ok_recv.values())
        st["completed"] = sum(1 for k in self.ok_recv if self.completes_of_key(k))
        st["completed_by_unknown"] = self.completed_by_unknown
        st["recovered"] = len(self.recovered)
        st["dead_letters"] = len(self.dlq)
        st["remaining"] = len(self.remaining)
        st["crashes"] = len(self.crashes)
        st["lost"] = len(self.lost)
        st["max_delivery_count"] = self.mdc
        redelivered, dlq_after_expiry = 0, 0
        dlq_keys = {m["key"] for m in self.dlq}
        for key, lst in self.ok_recv.items():
            for (ao, am), (bo, bm) in zip(lst, lst[1:]):
                if not self.settles.get(am["token"]) and bm["dc"] == am["dc"] + 1:
                    redelivered += 1
            if key in dlq_keys and lst:
                o, m = lst[-1]
                if m["dc"] == self.mdc and not self.settles.get(m["token"]):
                    dlq_after_expiry += 1
        st["redelivered_after_expiry"] = redelivered
        st["dead_lettered_after_expiry"] = dlq_after_expiry
        st["max_dc_seen"] = max([m["dc"] for l in self.ok_recv.values() for _, m in l] or [0])
        st["violations"] = {k: len(v) for k, v in self.v.items()}
        st["valid"] = not self.v

    def report(self, out=sys.stdout):
        st = self.stats
        p = lambda s: print(s, file=out)     # noqa: E731
        p("{:valid? %s" % ("true" if st["valid"] else "false"))
        p(" :sent {:ok %d :unknown %d :fail %d}" % (st["sent_ok"], st["sent_unknown"], st["sent_fail"]))
        p(" :receives {:ok %d :unknown %d :fail %d} :deliveries %d"
          % (st["receives_ok"], st["receives_unknown"], st["receives_fail"], st["deliveries"]))
        p(" :settles {:ok %d :unknown %d :fail %d :lock-lost %d}"
          % (st["settles_ok"], st["settles_unknown"], st["settles_fail"], st["settles_sb002"]))
        p(" :completed %d :completed-by-unknown %d :dead-letters %d :remaining %d :crashes %d"
          % (st["completed"], st["completed_by_unknown"], st["dead_letters"], st["remaining"], st["crashes"]))
        p(" :redelivered-after-expiry %d :dead-lettered-after-expiry %d :max-delivery-count-seen %d"
          % (st["redelivered_after_expiry"], st["dead_lettered_after_expiry"], st["max_dc_seen"]))
        names = [("lost", "I1 lost"), ("found-twice", "I1 found twice"), ("unexpected", "I2 unexpected"),
                 ("lease-overlaps", "I3 lease overlap"), ("stale-settles", "I3 stale settle"),
                 ("spurious-lock-lost", "I3 spurious lock lost"),
                 ("duplicated-completes", "I4 double complete"),
                 ("delivered-after-complete", "I4 delivered after complete"),
                 ("wrong-delivery-counts", "I5 delivery count"), ("dlq-boundary", "I6 DLQ boundary"),
                 ("unexpected-errors", "unexpected-error"), ("history", "history")]
        p(" :recovered %d" % st["recovered"])
        for short, cat in names:
            p(" :%s %d" % (short, len(self.v.get(cat, []))))
        p("}")
        for cat, msgs in self.v.items():
            p("VIOLATION %s (%d):" % (cat, len(msgs)))
            for m in msgs[:15]:
                p("  - " + m)
            if len(msgs) > 15:
                p("  ... %d more" % (len(msgs) - 15))


# ---------------------------------------------------------- fabricated histories

def fabricate(d):
    """A clean history and one history per kind of violation; the checker must
    pass the first and catch each of the others (see test/t/fault_harness_checker.pl)."""
    os.makedirs(d, exist_ok=True)
    T = 1000.0

    def inv(i, client, op, t0, t1, outcome, **kw):
        a = {"ev": "invoke", "id": i, "client": client, "op": op, "t_invoke": t0}
        for k in ("keys", "md5s", "max", "tokens"):
            if k in kw:
                a[k] = kw[k]
        b = dict(a, ev="done", t_complete=t1, outcome=outcome, sqlstate=kw.pop("sqlstate", None))
        b.update(kw)
        return [a, b] if t1 is not None else [a]

    def msg(key, seq, tok, dc, t, lock=5.0):
        return {"seq": seq, "key": key, "md5": "h-" + key, "token": tok, "dc": dc, "lu": t + lock, "poison": False}

    def drain(t, dlq=(), remaining=(), mdc=3):
        return [{"ev": "meta", "client": "drain", "t": t, "queue": "q", "lock_duration": 5.0,
                 "max_delivery_count": mdc},
                {"ev": "dlq", "client": "drain", "t": t, "msgs": list(dlq)},
                {"ev": "remaining", "client": "drain", "t": t, "msgs": list(remaining)},
                {"ev": "drained", "client": "drain", "t": t, "complete": True}]

    def send(i, keys, t, outcome="ok", seqs=None, **extra):
        kw = {"keys": keys, "md5s": ["h-" + k for k in keys]}
        kw.update(extra)
        if outcome == "ok":
            kw["seqs"] = seqs
        return inv(i, "p0", "send", t, t + 0.01, outcome, **kw)

    def good():
        h = []
        h += send("s1", ["a", "b"], T, seqs=[1, 2])
        h += send("s2", ["c"], T + 0.1, seqs=[3])
        h += send("s3", ["x"], T + 0.2, outcome="fail", rolled_back=True)    # rolled back
        h += send("s4", ["u"], T + 0.3, outcome="unknown")      # recovered below
        h += send("s5", ["p"], T + 0.4, seqs=[5])
        # a: received, completed
        h += inv("r1", "c0", "receive", T + 1, T + 1.01, "ok", max=2,
                 msgs=[msg("a", 1, "ta1", 1, T + 1), msg("b", 2, "tb1", 1, T + 1)])
        h += inv("k1", "c0", "complete", T + 1.1, T + 1.11, "ok", tokens=["ta1"])
        # b: abandoned, received again at once (dc 2), completed
        h += inv("k2", "c0", "abandon", T + 1.2, T + 1.21, "ok", tokens=["tb1"])
        h += inv("r2", "c1", "receive", T + 1.3, T + 1.31, "ok", max=1, msgs=[msg("b", 2, "tb2", 2, T + 1.3)])
        h += inv("k3", "c1", "complete", T + 1.4, T + 1.41, "ok", tokens=["tb2"])
        # c: a receive of unknown outcome (cut by a kill) took it: the next delivery is 2
        h += inv("r3", "c2", "receive", T + 2, None, "unknown", max=3)
        h += inv("r4", "c1", "receive", T + 8, T + 8.01, "ok", max=1, msgs=[msg("c", 3, "tc2", 2, T + 8)])
        # the old lock of c, replayed after expiry, fails SB002 (allowed)
        h += inv("k4", "c0", "complete", T + 9, T + 9.01, "fail", tokens=["tc-old"], sqlstate="SB002")
        h += inv("k5", "c1", "complete", T + 9.1, T + 9.11, "ok", tokens=["tc2"])
        # u: unknown send, delivered: recovered
        h += inv("r5", "c1", "receive", T + 10, T + 10.01, "ok", max=1, msgs=[msg("u", 4, "tu1", 1, T + 10)])
        h += inv("k6", "c1", "complete", T + 10.1, T + 10.11, "ok", tokens=["tu1"])
        # p: poison, three deliveries, dead-lettered at the limit
        for n in range(3):
            t = T + 11 + n
            h += inv("rp%d" % n, "c0", "receive", t, t + 0.01, "ok", max=1, msgs=[msg("p", 5, "tp%d" % n, n + 1, t)])
            h += inv("ap%d" % n, "c0", "abandon", t + 0.1, t + 0.11, "ok", tokens=["tp%d" % n])
        # a crash, after which a lock may be lost and a count may be lost
        h += send("s6", ["z"], T + 20, seqs=[6])
        h += inv("rz1", "c0", "receive", T + 21, T + 21.01, "ok", max=1, msgs=[msg("z", 6, "tz1", 1, T + 21)])
        h += [{"ev": "crash", "t_start": T + 21.5, "t_end": T + 22, "what": "immediate stop"}]
        h += inv("rz2", "c1", "receive", T + 22.5, T + 22.51, "ok", max=1, msgs=[msg("z", 6, "tz2", 1, T + 22.5)])
        h += inv("kz", "c1", "complete", T + 22.6, T + 22.61, "ok", tokens=["tz2"])
        # w: a receive waiting (max_wait) since before another's receive and
        # abandon of the message gets it next: replies come in grant order
        h += send("s7", ["w"], T + 24, seqs=[7])
        h += inv("rw2", "c2", "receive", T + 25.0, T + 25.5, "ok", max=1, msgs=[msg("w", 7, "tw2", 2, T + 25.4)])
        h += inv("rw1", "c1", "receive", T + 25.1, T + 25.11, "ok", max=1, msgs=[msg("w", 7, "tw1", 1, T + 25.1)])
        h += inv("aw1", "c1", "abandon", T + 25.2, T + 25.21, "ok", tokens=["tw1"])
        h += inv("kw2", "c2", "complete", T + 25.6, T + 25.61, "ok", tokens=["tw2"])
        h += drain(T + 40, dlq=[{"seq": 5, "key": "p", "md5": "h-p", "dc": 3, "reason": "MaxDeliveryCountExceeded",
                                  "state": "active", "lu": None}])
        return h

    base = good()
    cases = {"good": (base, None)}

    # a message acknowledged and never seen again
    h = [r for r in base if r.get("id") not in ("k6", "r5")]
    h = [r for r in h if r.get("ev") not in ("meta", "dlq", "remaining", "drained")]
    h += send("s9", ["lost1"], T + 3, seqs=[9])
    h += drain(T + 40, dlq=[{"seq": 5, "key": "p", "md5": "h-p", "dc": 3, "reason": "MaxDeliveryCountExceeded",
                              "state": "active", "lu": None}])
    cases["lost"] = (h, "I1 lost")

    # the same message completed twice (a stale token accepted after a redelivery)
    h = list(base)
    h += send("s10", ["d"], T + 30, seqs=[10])
    h += inv("rd1", "c0", "receive", T + 30.1, T + 30.11, "ok", max=1, msgs=[msg("d", 10, "td1", 1, T + 30.1)])
    h += inv("rd2", "c1", "receive", T + 36, T + 36.01, "ok", max=1, msgs=[msg("d", 10, "td2", 2, T + 36)])
    h += inv("kd1", "c1", "complete", T + 36.1, T + 36.11, "ok", tokens=["td2"])
    h += inv("kd2", "c0", "complete", T + 36.2, T + 36.21, "ok", tokens=["td1"])
    cases["double-complete"] = (h, "I4 double complete")

    # two valid locks at once: delivered again 1 s into a 5 s lock
    h = list(base)
    h += send("s11", ["e"], T + 30, seqs=[11])
    h += inv("re1", "c0", "receive", T + 30.1, T + 30.11, "ok", max=1, msgs=[msg("e", 11, "te1", 1, T + 30.1)])
    h += inv("re2", "c1", "receive", T + 31, T + 31.01, "ok", max=1, msgs=[msg("e", 11, "te2", 2, T + 31)])
    h += inv("ke2", "c1", "complete", T + 31.1, T + 31.11, "ok", tokens=["te2"])
    cases["overlap"] = (h, "I3 lease overlap")

    # a delivery count that skips with nothing to explain it
    h = list(base)
    h += send("s12", ["f"], T + 30, seqs=[12])
    h += inv("rf1", "c0", "receive", T + 30.1, T + 30.11, "ok", max=1, msgs=[msg("f", 12, "tf1", 2, T + 30.1)])
    h += inv("kf1", "c0", "complete", T + 30.2, T + 30.21, "ok", tokens=["tf1"])
    cases["count-skip"] = (h, "I5 delivery count")

    # a delivery count that repeats with no crash in between
    h = list(base)
    h += send("s13", ["g"], T + 30, seqs=[13])
    h += inv("rg1", "c0", "receive", T + 30.1, T + 30.11, "ok", max=1, msgs=[msg("g", 13, "tg1", 1, T + 30.1)])
    h += inv("rg2", "c0", "receive", T + 36, T + 36.01, "ok", max=1, msgs=[msg("g", 13, "tg2", 1, T + 36)])
    h += inv("kg2", "c0", "complete", T + 36.1, T + 36.11, "ok", tokens=["tg2"])
    cases["count-repeat"] = (h, "I5 delivery count")

    # a dead letter below the limit
    h = [r for r in base if r.get("ev") not in ("meta", "dlq", "remaining", "drained")]
    h += drain(T + 40, dlq=[{"seq": 5, "key": "p", "md5": "h-p", "dc": 2, "reason": "MaxDeliveryCountExceeded",
                              "state": "active", "lu": None}])
    cases["dlq-boundary"] = (h, "I6 DLQ boundary")

    # a body nobody sent
    h = list(base)
    h += inv("rx", "c0", "receive", T + 30, T + 30.01, "ok", max=1, msgs=[msg("ghost", 99, "tx", 1, T + 30)])
    h += inv("kx", "c0", "complete", T + 30.1, T + 30.11, "ok", tokens=["tx"])
    cases["unexpected"] = (h, "I2 unexpected")

    # a complete that succeeded on an expired lock
    h = list(base)
    h += send("s14", ["h"], T + 30, seqs=[14])
    h += inv("rh1", "c0", "receive", T + 30.1, T + 30.11, "ok", max=1, msgs=[msg("h", 14, "th1", 1, T + 30.1)])
    h += inv("kh1", "c0", "complete", T + 37, T + 37.01, "ok", tokens=["th1"])
    cases["stale-settle"] = (h, "I3 stale settle")

    # a message received again after its complete was acknowledged
    h = list(base)
    h += send("s15", ["i"], T + 30, seqs=[15])
    h += inv("ri1", "c0", "receive", T + 30.1, T + 30.11, "ok", max=1, msgs=[msg("i", 15, "ti1", 1, T + 30.1)])
    h += inv("ki1", "c0", "complete", T + 30.2, T + 30.21, "ok", tokens=["ti1"])
    h += inv("ri2", "c1", "receive", T + 36, T + 36.01, "ok", max=1, msgs=[msg("i", 15, "ti2", 2, T + 36)])
    cases["redelivered"] = (h, "I4 delivered after complete")

    # a count that goes back by two across a single crash
    h = list(base)
    h += send("s16", ["j"], T + 30, seqs=[16])
    h += inv("rj1", "c0", "receive", T + 30.1, T + 30.11, "ok", max=1, msgs=[msg("j", 16, "tj1", 1, T + 30.1)])
    h += inv("aj1", "c0", "abandon", T + 30.2, T + 30.21, "ok", tokens=["tj1"])
    h += inv("rj2", "c0", "receive", T + 30.3, T + 30.31, "ok", max=1, msgs=[msg("j", 16, "tj2", 2, T + 30.3)])
    h += [{"ev": "crash", "t_start": T + 31, "t_end": T + 32, "what": "kill -9"}]
    h += inv("rj3", "c1", "receive", T + 33, T + 33.01, "ok", max=1, msgs=[msg("j", 16, "tj3", 1, T + 33)])
    h += inv("kj3", "c1", "complete", T + 33.1, T + 33.11, "ok", tokens=["tj3"])
    cases["count-back-two"] = (h, "I5 delivery count")

    # one receive of unknown outcome (max_messages 1) cannot explain skips of two messages
    h = list(base)
    h += send("s17", ["l", "m"], T + 30, seqs=[17, 18])
    h += inv("ru", "c2", "receive", T + 30.1, T + 30.5, "unknown", max=1, sqlstate="57P01")
    for k, sq in (("l", 17), ("m", 18)):
        h += inv("r" + k, "c0", "receive", T + 36, T + 36.01, "ok", max=1, msgs=[msg(k, sq, "t" + k, 2, T + 36)])
        h += inv("k" + k, "c0", "complete", T + 36.1, T + 36.11, "ok", tokens=["t" + k])
    cases["unknown-capacity"] = (h, "I5 delivery count")

    for name, (h, _) in cases.items():
        with open(os.path.join(d, name + ".jsonl"), "w") as f:
            for r in h:
                f.write(json.dumps(r) + "\n")
    with open(os.path.join(d, "expected.json"), "w") as f:
        json.dump({n: e for n, (_, e) in cases.items()}, f)
    return cases


def main():
    p = argparse.ArgumentParser(description="check an sbqueue fault-test history")
    p.add_argument("history", nargs="*")
    p.add_argument("--json", help="write the summary as JSON here")
    p.add_argument("--fabricate", metavar="DIR")
    args = p.parse_args()
    if args.fabricate:
        fabricate(args.fabricate)
        return 0
    if not args.history:
        p.error("no history")
    c = Checker(load(args.history))
    valid = c.run()
    c.report()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(c.stats, details={k: v[:50] for k, v in c.v.items()}), f, indent=1)
    return 0 if valid else 1


if __name__ == "__main__":
    sys.exit(main())
