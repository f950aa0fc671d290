#!/usr/bin/env python3
"""test/monitoring/check_queries.py: docs/monitoring/queries.yaml and alerts.yaml hold.

Usage: check_queries.py (libpq environment: a database of its own, where it creates
schema sbqueue and the extension in it)

Checks that queries.yaml is in the exporter's format (a query and a list of metrics,
each LABEL, GAUGE or COUNTER with a description), that each query runs and returns
its metrics' columns in order, labels as text and every other value a number, that
the numbers say what is there (a queue with one available, one locked and one dead
message, a topic sent to once), and that every metric alerts.yaml names is one the
queries make. Then sbq_metrics_text(): Prometheus's text exposition format, line by
line (HELP and TYPE before each family's samples, a family's samples together,
counters named _total, label values escaped), numbers that agree with the views and
with sbq_lock_table() and sbq_queue_table(), labels escaped in a database whose name
has a quote and a backslash, and a role without rights seeing no queue's samples and
not the server's totals of either table. Exits non-zero on the first failure.
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
    locks = rows["sbq_locks"]
    if len(locks) != 1 or locks[0]["used"] < 1 or locks[0]["share"] < locks[0]["used"] or \
            locks[0]["capacity"] < locks[0]["share"]:
        fail("sbq_locks counts the locked message within the share and the capacity: %r" % locks)
    ok("sbq_locks counts the locked message from shared memory")
    qt = rows["sbq_queue_entries"]
    if len(qt) != 1 or not (qt[0]["used"] >= 2 if qt[0]["capacity"] > 0 else qt[0]["used"] == 0) or \
            qt[0]["share"] < qt[0]["used"] or qt[0]["capacity"] < qt[0]["share"] or qt[0]["deleted"] != 0:
        fail("sbq_queue_entries counts the database's entries (its own, the queues') within the share "
             "and the capacity, none deleted: %r" % qt)
    ok("sbq_queue_entries counts the database's entries of the table of queues")

    fams = check_exposition()
    clash = made & fams
    if clash:
        fail("the exporter's queries and sbq_metrics_text() name no family alike "
             "(scraped together, the series would collide): %s" % sorted(clash))
    ok("the exporter's queries and sbq_metrics_text() name no family alike")

    named = set()
    for group in alerts["groups"]:
        for rule in group["rules"]:
            named |= set(re.findall(r"\bsbq_[a-z_]+\b", rule["expr"]))
    unknown = named - made
    if not named or unknown:
        fail("alerts.yaml names only metrics queries.yaml makes: unknown %s" % sorted(unknown))
    ok("alerts.yaml names %d metrics, all made by queries.yaml" % len(named))


SAMPLE = re.compile(r'^([a-z_]+)\{((?:[a-z_]+="(?:[^"\\\n]|\\[\\"n])*",?)*)\} (\S+)$')
LABEL = re.compile(r'([a-z_]+)="((?:[^"\\\n]|\\[\\"n])*)"')


def unescape(v):
    return re.sub(r'\\(.)', lambda m: {"n": "\n"}.get(m.group(1), m.group(1)), v)


def parse_exposition(text):
    """{(family, frozenset(labels)): value}, failing on any line out of format."""
    samples = {}
    helped, typed, done = set(), {}, set()
    current = None
    for line in text.splitlines():
        m = re.match(r"^# (HELP|TYPE) ([a-z_]+) (.+)$", line)
        if m:
            kind, fam, rest = m.groups()
            if fam in done:
                fail("family %s appears once: %r" % (fam, line))
            if kind == "HELP":
                if fam in helped:
                    fail("one HELP line for %s" % fam)
                if current is not None and current != fam:
                    done.add(current)
                helped.add(fam)
                current = fam
            else:
                if rest not in ("gauge", "counter") or fam != current:
                    fail("TYPE follows its HELP and is gauge or counter: %r" % line)
                if (rest == "counter") != fam.endswith("_total"):
                    fail("counters, and only they, end in _total: %r" % line)
                typed[fam] = rest
            continue
        m = SAMPLE.match(line)
        if not m:
            fail("a sample line: %r" % line)
        fam, labels, value = m.groups()
        if fam != current or fam not in typed:
            fail("a sample follows its family's HELP and TYPE: %r" % line)
        key = (fam, frozenset((k, unescape(v)) for k, v in LABEL.findall(labels)))
        if key in samples:
            fail("a sample once: %r" % line)
        samples[key] = float(value)
    return samples


def value(samples, fam, **labels):
    for (f, ls), v in samples.items():
        if f == fam and all((k, str(x)) in ls for k, x in labels.items()):
            return v
    return None


def check_exposition():
    with psycopg.connect(autocommit=True) as conn:
        conn.execute("SET search_path = sbqueue")
        text = conn.execute("SELECT sbq_metrics_text()").fetchone()[0]
        db = conn.execute("SELECT current_database()").fetchone()[0]
        lt = conn.execute("SELECT capacity, in_use, database_share, database_in_use FROM sbq_lock_table()").fetchone()
        qt = conn.execute("SELECT capacity, in_use, database_share, database_in_use, database_deleted "
                          "FROM sbq_queue_table()").fetchone()
        view = conn.execute("SELECT count(*) FROM sbq_metrics").fetchone()[0]
        samples = parse_exposition(text)
        if len(samples) != view:
            fail("sbq_metrics_text has a sample per row of sbq_metrics: %d, %d" % (len(samples), view))
        for (fam, ls), _ in samples.items():
            if ("database", db) not in ls:
                fail("every sample names the database: %s %s" % (fam, sorted(ls)))
        want = [
            (("sbq_messages",), dict(queue="mon", state="active"), 1),
            (("sbq_messages",), dict(queue="mon", state="locked"), 1),
            (("sbq_messages",), dict(queue="mon", state="dead_letter"), 1),
            (("sbq_sent_total",), dict(queue="mon"), 3),
            (("sbq_dead_lettered_total",), dict(queue="mon"), 1),
            (("sbq_messages",), dict(queue="mon_t/subscriptions/s", state="active"), 1),
            (("sbq_topic_sent_total",), dict(topic="mon_t"), 1),
            (("sbq_topic_subscriptions",), dict(topic="mon_t"), 1),
            (("sbq_lock_table_capacity",), {}, lt[0]),
            (("sbq_lock_table_database_share",), {}, lt[2]),
            (("sbq_lock_table_database_in_use",), {}, lt[3]),
            (("sbq_queue_table_capacity",), {}, qt[0]),
            (("sbq_queue_table_database_share",), {}, qt[2]),
            (("sbq_queue_table_database_in_use",), {}, qt[3]),
            (("sbq_queue_table_database_deleted",), {}, qt[4]),
        ]
        for (fam,), labels, want_v in want:
            got = value(samples, fam, **labels)
            if got != want_v:
                fail("%s%r is %r: %r" % (fam, labels, want_v, got))
        if not lt[3] >= 1 or lt[1] is None or lt[1] < lt[3]:
            fail("sbq_lock_table() counts this database's lock within the server's: %r" % (lt,))
        ok("sbq_metrics_text() is in the exposition format (%d samples) and agrees with the views" % len(samples))
        fams = {f for (f, _) in samples}

        # a role with no rights: no queue or topic samples, no server-wide lock count
        conn.execute("DROP ROLE IF EXISTS sbq_mon_nobody")
        conn.execute("CREATE ROLE sbq_mon_nobody")
        conn.execute("GRANT USAGE ON SCHEMA sbqueue TO sbq_mon_nobody")
        try:
            conn.execute("SET ROLE sbq_mon_nobody")
            text = conn.execute("SELECT sbqueue.sbq_metrics_text()").fetchone()[0]
            conn.execute("RESET ROLE")
            mine = parse_exposition(text)
            leaked = [k for k in mine if any(l[0] in ("queue", "topic") for l in k[1])]
            if leaked or value(mine, "sbq_lock_table_in_use") is not None or \
                    value(mine, "sbq_lock_table_capacity") != lt[0] or \
                    value(mine, "sbq_queue_table_in_use") is not None or \
                    value(mine, "sbq_queue_table_capacity") != qt[0]:
                fail("a role with no rights sees no entity and not the server's lock or queue-table count: %r"
                     % sorted(mine))
            ok("a role with no rights sees only this database's lock table, table of queues and worker")
        finally:
            conn.execute("RESET ROLE")
            conn.execute("REVOKE USAGE ON SCHEMA sbqueue FROM sbq_mon_nobody")
            conn.execute("DROP ROLE sbq_mon_nobody")

        # label values are escaped: a database named with a quote and a backslash
        odd = 'sbq_mon "odd\\db'
        conn.execute('DROP DATABASE IF EXISTS "%s"' % odd.replace('"', '""'))
        conn.execute('CREATE DATABASE "%s"' % odd.replace('"', '""'))
        try:
            with psycopg.connect(dbname=odd, autocommit=True) as c2:
                c2.execute("CREATE EXTENSION sbqueue")
                c2.execute("SELECT sbq_create_queue('q')")
                text = c2.execute("SELECT sbq_metrics_text()").fetchone()[0]
            got = parse_exposition(text)
            if value(got, "sbq_messages", database=odd, queue="q", state="active") != 0:
                fail("the database's name comes back from its escaped label: %r" % text[:400])
            ok("label values are escaped (a database named %r)" % odd)
        finally:
            conn.execute('DROP DATABASE "%s"' % odd.replace('"', '""'))
    return fams


if __name__ == "__main__":
    main()
