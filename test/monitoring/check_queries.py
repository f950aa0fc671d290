#!/usr/bin/env python3
"""test/monitoring/check_queries.py: docs/monitoring/queries.yaml and alerts.yaml hold.

Usage: check_queries.py (libpq environment: a database of its own, where it creates
schema sbqueue and the extension in it)

Checks that queries.yaml is in the exporter's format (a query and a list of metrics,
each LABEL, GAUGE or COUNTER with a description), that each query runs and returns
its metrics' columns in order, labels as text and every other value a number, that
the numbers say what is there (a queue with one available, one locked and one dead
message, a topic sent to once), and that every metric alerts.yaml names is one the
queries make. Exits non-zero on the first failure.
"""
import decimal
import os
import re
import sys

import psycopg
import yaml

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
USAGES = {"LABEL", "GAUGE", "COUNTER"}


def fail(msg):
    print("not ok - " + msg)
    sys.exit(1)


def ok(msg):
    print("ok - " + msg)


def main():
    with open(os.path.join(ROOT, "docs/monitoring/queries.yaml")) as f:
        queries = yaml.safe_load(f)
    with open(os.path.join(ROOT, "docs/monitoring/alerts.yaml")) as f:
        alerts = yaml.safe_load(f)

    made = set()
    for name, q in queries.items():
        if set(q) != {"query", "metrics"}:
            fail("%s has a query and metrics, nothing else: %s" % (name, sorted(q)))
        for m in q["metrics"]:
            (col, spec), = m.items()
            if spec.get("usage") not in USAGES or not spec.get("description"):
                fail("%s.%s has a usage of %s and a description" % (name, col, USAGES))
            if spec["usage"] != "LABEL":
                made.add("%s_%s" % (name, col))
    ok("queries.yaml is in the exporter's format (%d queries, %d metrics)" % (len(queries), len(made)))

    with psycopg.connect(autocommit=True) as conn:
        conn.execute("CREATE SCHEMA sbqueue")
        conn.execute("CREATE EXTENSION sbqueue SCHEMA sbqueue")
        conn.execute("SET search_path = sbqueue")
        conn.execute("SELECT sbq_create_queue('mon')")
        conn.execute("SELECT sbq_send('mon', b) FROM unnest(ARRAY['a', 'b', 'c']) b")
        conn.execute("SELECT sbq_deadletter('mon', lock_token) FROM sbq_receive('mon')")
        conn.execute("SELECT lock_token FROM sbq_receive('mon')")
        conn.execute("SELECT sbq_create_topic('mon_t'), sbq_create_subscription('mon_t', 's')")
        conn.execute("SELECT sbq_send('mon_t', 'x')")
        conn.execute("RESET search_path")
        rows = {}
        for name, q in queries.items():
            cur = conn.execute(q["query"])
            cols = [d.name for d in cur.description]
            want = [next(iter(m)) for m in q["metrics"]]
            if cols != want:
                fail("%s returns %s, its metrics are %s" % (name, cols, want))
            labels = {next(iter(m)) for m in q["metrics"] if next(iter(m.values()))["usage"] == "LABEL"}
            got = cur.fetchall()
            for r in got:
                for col, v in zip(cols, r):
                    if col in labels:
                        if not isinstance(v, str):
                            fail("%s.%s is a label, text: %r" % (name, col, v))
                    elif isinstance(v, bool) or not isinstance(v, (int, float, decimal.Decimal)):
                        fail("%s.%s is a number: %r" % (name, col, v))
            rows[name] = [dict(zip(cols, r)) for r in got]
            ok("%s runs: %d rows, its columns in order, labels text, values numbers" % (name, len(got)))

    q = {r["queue"]: r for r in rows["sbq_queue"]}
    m = q.get("mon")
    if m is None or (m["active_count"], m["locked_count"], m["dead_letter_count"], m["sent"]) != (1, 1, 1, 3):
        fail("sbq_queue shows mon with 1 active, 1 locked, 1 dead letter, 3 sent: %r" % m)
    if not m["oldest_message_age_seconds"] > 0:
        fail("sbq_queue's oldest_message_age_seconds is above 0: %r" % m)
    ok("sbq_queue counts what the queue holds")
    t = {r["topic"]: r for r in rows["sbq_topic"]}.get("mon_t")
    if t is None or (t["subscription_count"], t["sent"], t["dropped"]) != (1, 1, 0):
        fail("sbq_topic shows mon_t with 1 subscription, 1 sent, 0 dropped: %r" % t)
    ok("sbq_topic counts the send")
    if len(rows["sbq_locks"]) != 1 or rows["sbq_locks"][0]["used"] < 1:
        fail("sbq_locks counts the locked message: %r" % rows["sbq_locks"])
    ok("sbq_locks counts the locked message")

    named = set()
    for group in alerts["groups"]:
        for rule in group["rules"]:
            named |= set(re.findall(r"\bsbq_[a-z_]+\b", rule["expr"]))
    unknown = named - made
    if not named or unknown:
        fail("alerts.yaml names only metrics queries.yaml makes: unknown %s" % sorted(unknown))
    ok("alerts.yaml names %d metrics, all made by queries.yaml" % len(named))


if __name__ == "__main__":
    main()
