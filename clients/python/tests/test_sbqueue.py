"""The Python client against a real server.

    PGHOST=... PGPORT=... PGDATABASE=... python3 -m unittest discover -s clients/python/tests

The database needs sbqueue (CREATE EXTENSION sbqueue) and a role may be created
(the rights test makes one). Each test makes its queues and topics and deletes them.
"""

import datetime
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
import unittest
import uuid

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import psycopg  # noqa: E402

import sbqueue  # noqa: E402
from sbqueue import errors  # noqa: E402

CONNINFO = os.environ.get("SBQ_CONNINFO", "")


def qname(prefix):
    return "%s-%s" % (prefix, uuid.uuid4().hex[:8])


class Base(unittest.TestCase):
    def setUp(self):
        self.client = sbqueue.Client.connect(CONNINFO)
        self.queues = []
        self.topics = []

    def tearDown(self):
        for q in self.queues:
            try:
                self.client.delete_queue(q)
            except sbqueue.SbqError:
                pass
        for t in self.topics:
            try:
                self.client.delete_topic(t)
            except sbqueue.SbqError:
                pass
        self.client.close()

    def queue(self, prefix="py", **options):
        q = qname(prefix)
        self.client.create_queue(q, **options)
        self.queues.append(q)
        return q

    def topic(self, prefix="pyt", **options):
        t = qname(prefix)
        self.client.create_topic(t, **options)
        self.topics.append(t)
        return t


class MessageType(Base):
    def test_fields_are_sbq_message_columns(self):
        rows = self.client.conn.execute(
            "SELECT a.attname FROM pg_attribute a"
            " WHERE a.attrelid = (SELECT typrelid FROM pg_type WHERE typname = 'sbq_message')"
            "   AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum").fetchall()
        self.assertEqual(tuple(r[0] for r in rows), sbqueue.MESSAGE_FIELDS)
        import dataclasses
        self.assertEqual(tuple(f.name for f in dataclasses.fields(sbqueue.ReceivedMessage)),
                         sbqueue.MESSAGE_FIELDS)


class SendReceiveSettle(Base):
    def test_bodies_round_trip(self):
        q = self.queue()
        s, r = self.client.sender(q), self.client.receiver(q)
        every_byte = bytes(range(256)) * 4
        big = os.urandom(1024 * 1024)
        s.send("héllo")
        s.send(every_byte)
        s.send({"a": [1, 2, {"b": None}]})
        s.send(big)
        got = r.receive(10)
        self.assertEqual(len(got), 4)
        self.assertEqual(got[0].body_text(), "héllo")
        self.assertEqual(got[0].content_type, "text/plain; charset=utf-8")
        self.assertEqual(got[1].body, every_byte)
        self.assertIsNone(got[1].content_type)
        self.assertEqual(got[2].body_json(), {"a": [1, 2, {"b": None}]})
        self.assertEqual(got[2].content_type, "application/json")
        self.assertEqual(got[3].body, big)
        self.assertEqual(r.complete(got), 4)
        self.assertEqual(r.peek(10), [])

    def test_send_options_and_batch(self):
        q = self.queue()
        s, r = self.client.sender(q), self.client.receiver(q)
        seq = s.send("x", message_id="m1", correlation_id="c", subject="s", reply_to="rt",
                     time_to_live=60, application_properties={"k": 1})
        seqs = s.send_batch([b"a", b"b", b"c"], subject="batch")
        self.assertEqual(len(seqs), 3)
        self.assertEqual(seqs, sorted(seqs))
        self.assertGreater(seqs[0], seq)
        msgs = r.receive(10)
        self.assertEqual([m.sequence_number for m in msgs], [seq] + seqs)
        m = msgs[0]
        self.assertEqual((m.message_id, m.correlation_id, m.subject, m.reply_to),
                         ("m1", "c", "s", "rt"))
        self.assertEqual(m.application_properties, {"k": 1})
        self.assertEqual(m.time_to_live, datetime.timedelta(seconds=60))
        self.assertEqual([x.subject for x in msgs[1:]], ["batch"] * 3)
        with self.assertRaises(TypeError):
            s.send_batch(["a", b"b"])
        with self.assertRaises(TypeError):
            s.send("x", colour="red")

    def test_settlements(self):
        q = self.queue(max_delivery_count=5)
        s, r = self.client.sender(q), self.client.receiver(q)
        for i in range(5):
            s.send("m%d" % i)
        m = r.receive(5)
        # tokens as messages, UUIDs, strings and lists of strings: no cast needed
        self.assertEqual(r.complete(str(m[0].lock_token)), 1)
        self.assertEqual(r.complete([str(m[1].lock_token)]), 1)
        r.abandon(m[2].lock_token, {"tried": 1})
        r.defer(m[3])
        r.dead_letter(m[4], "bad", "it was bad", {"why": "test"})
        again = r.receive(5)
        self.assertEqual([x.body_text() for x in again], ["m2"])
        self.assertEqual(again[0].application_properties, {"tried": 1})
        self.assertEqual(again[0].delivery_count, 2)
        before = again[0].locked_until
        time.sleep(0.01)
        self.assertGreater(r.renew(again[0]), before)
        r.complete(again)
        deferred = r.receive_deferred([m[3].sequence_number])
        self.assertEqual(deferred[0].body_text(), "m3")
        r.complete(deferred)
        dl = self.client.dead_letter_receiver(q).receive(1)
        self.assertEqual((dl[0].dead_letter_reason, dl[0].dead_letter_error_description),
                         ("bad", "it was bad"))
        self.client.dead_letter_receiver(q).complete(dl)

    def test_many_settled_together_or_not_at_all(self):
        q = self.queue()
        s, r = self.client.sender(q), self.client.receiver(q)
        s.send_batch(["a", "b"])
        m = r.receive(2)
        with self.assertRaises(sbqueue.MessageLockLost):
            r.abandon([m[0], uuid.uuid4()])
        self.assertEqual(r.complete(m), 2)     # the first abandon rolled back

    def test_settle_reports_each_token(self):
        q = self.queue()
        s, r = self.client.sender(q), self.client.receiver(q)
        s.send_batch(["a", "b", "c"])
        m = r.receive(3)
        r.complete(m[1])
        got = r.settle([m[0], m[1], uuid.uuid4(), m[2], m[0]], "complete")
        self.assertEqual([x.outcome for x in got],
                         ["completed", "lock_lost", "lock_lost", "completed", "lock_lost"])
        self.assertEqual([x.lock_token for x in got[:2]], [m[0].lock_token, m[1].lock_token])
        self.assertEqual([x.settled for x in got], [True, False, False, True, False])
        self.assertEqual(r.peek(10), [])
        s.send("d")
        d = r.receive(1)
        renewed = r.settle(d, "renew")
        self.assertEqual(renewed[0].outcome, "renewed")
        self.assertGreater(renewed[0].locked_until, d[0].locked_until)
        self.assertEqual(r.settle(d, "abandon", delay=30)[0].outcome, "abandoned")
        with self.assertRaises(sbqueue.InvalidArgument):
            r.settle(d, "complete", reason="not for a completion")

    def test_abandon_with_a_delay(self):
        q = self.queue()
        s, r = self.client.sender(q), self.client.receiver(q)
        s.send_batch(["a", "b"])
        m = r.receive(2)
        t0 = time.monotonic()
        r.abandon(m, delay=1.5)                   # both, in one call
        self.assertEqual(r.receive(2), [])
        again = r.receive(2, max_wait=5)
        waited = time.monotonic() - t0
        self.assertEqual(sorted(x.body_text() for x in again), ["a", "b"])
        self.assertGreaterEqual(waited, 1.4)
        self.assertEqual({x.delivery_count for x in again}, {2})
        # many at once, all or nothing, for every settlement
        self.assertGreater(r.renew(again), again[0].locked_until)
        r.defer(again)
        deferred = r.receive_deferred([x.sequence_number for x in again])
        r.dead_letter(deferred, "bad")
        self.assertEqual(len(self.client.dead_letter_receiver(q).peek(10)), 2)

    def test_queue_retry_backoff(self):
        q = self.queue(retry_delay=0.6, retry_backoff=True, max_retry_delay=1)
        s, r = self.client.sender(q), self.client.receiver(q)
        s.send("job")
        waits = []
        for _ in range(2):
            m = r.receive(1, max_wait=5)
            self.assertEqual(len(m), 1)
            t0 = time.monotonic()
            r.abandon(m)                          # no delay: the queue's back-off
            self.assertEqual(r.receive(1), [])
            m = r.receive(1, max_wait=5)
            waits.append(time.monotonic() - t0)
            r.abandon(m, delay=0)                 # an explicit 0: back at once
        self.assertGreaterEqual(waits[0], 0.5)    # delivery 1: 0.6 s
        self.assertGreaterEqual(waits[1], 0.9)    # delivery 3: 2.4 s, capped at 1 s
        self.assertLess(waits[1], 2.3)            # uncapped it would be 2.4 s or more

    def test_send_messages_each_with_its_own_properties(self):
        q = self.queue(duplicate_detection_window=60)
        s, r = self.client.sender(q), self.client.receiver(q)
        seqs = s.send_messages([
            sbqueue.OutgoingMessage("text", message_id="m1", subject="one"),
            {"body": b"\x00\xff", "message_id": "m2", "time_to_live": 60,
             "application_properties": {"k": [1]}},
            sbqueue.OutgoingMessage({"n": 1}, correlation_id="c3"),
            sbqueue.OutgoingMessage("again", message_id="m1"),   # a duplicate of m1
        ])
        self.assertEqual(len(seqs), 4)
        self.assertEqual(seqs[3], seqs[0])
        self.assertEqual(seqs[:3], sorted(seqs[:3]))
        got = r.peek(10)
        self.assertEqual([m.sequence_number for m in got], seqs[:3])
        self.assertEqual((got[0].body_text(), got[0].subject, got[0].content_type),
                         ("text", "one", "text/plain; charset=utf-8"))
        self.assertEqual((got[1].body, got[1].time_to_live, got[1].application_properties,
                          got[1].content_type),
                         (b"\x00\xff", datetime.timedelta(seconds=60), {"k": [1]}, None))
        self.assertEqual((got[2].body_json(), got[2].correlation_id, got[2].content_type),
                         ({"n": 1}, "c3", "application/json"))
        # the body of a JSON message is stored as sbq_send stores it
        s.send({"n": 1})
        self.assertEqual(r.peek(10)[-1].body, got[2].body)
        with self.assertRaises(sbqueue.InvalidArgument):
            s.send_batch(["a", "b"], message_id="shared")
        with self.assertRaises(sbqueue.InvalidArgument):
            s.send_messages([{"body": "ok"}, {"body": "bad", "message_id": ""}])
        self.assertEqual(len(r.peek(10)), 4)                  # nothing of the failed batch

    def test_drivers_need_no_cast(self):
        """Tokens as psycopg sends a str and a list of str (untyped), in text and binary
        protocol, reach the settlements without a cast; so do bodies of every byte value."""
        q = self.queue()
        conn = self.client.conn
        for binary in (False, True):
            with conn.cursor(binary=binary) as cur:
                every_byte = bytes(range(256)) * 4096          # 1 MiB
                cur.execute("SELECT sbq_send(%s, %s)", (q, every_byte))
                cur.execute("SELECT sbq_send_batch(%s, %s::text[])", (q, ["a", "b", "c", "d", "e"]))
                cur.execute("SELECT lock_token::text, body FROM sbq_receive(%s, 6)", (q,))
                rows = cur.fetchall()
                self.assertEqual(bytes(rows[0][1]), every_byte)
                toks = [t for t, _ in rows]
                cur.execute("SELECT sbq_complete(%s, %s)", (q, toks[0]))
                cur.execute("SELECT sbq_complete(%s, %s)", (q, toks[1:3]))
                cur.execute("SELECT sbq_renew(%s, %s)", (q, toks[3]))
                self.assertIsNotNone(cur.fetchone()[0])
                cur.execute("SELECT sbq_abandon(%s, %s)", (q, [toks[3]]))
                cur.execute("SELECT sbq_defer(%s, %s)", (q, toks[4]))
                cur.execute("SELECT sbq_deadletter(%s, %s, %s)", (q, toks[5], "why"))
                cur.execute("SELECT outcome FROM sbq_settle(%s, %s, %s)", (q, toks[:2], "complete"))
                self.assertEqual([o for (o,) in cur.fetchall()], ["lock_lost", "lock_lost"])
                cur.execute("SELECT count(*) FROM sbq_peek(%s, 10)", (q,))
                self.assertEqual(cur.fetchone()[0], 2)         # abandoned and deferred
                self.client.receiver(q).complete(self.client.receiver(q).receive(5))
                d = self.client.receiver(q).receive_deferred(
                    [m.sequence_number for m in self.client.receiver(q).peek(5)])
                self.client.receiver(q).complete(d)
                self.client.dead_letter_receiver(q).complete(
                    self.client.dead_letter_receiver(q).receive(5))

    def test_schedule_and_cancel(self):
        q = self.queue()
        s, r = self.client.sender(q), self.client.receiver(q)
        when = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(hours=1)
        seq = s.schedule("later", when)
        peeked = r.peek(1)
        self.assertEqual((peeked[0].state, peeked[0].sequence_number), ("scheduled", seq))
        self.assertEqual(r.receive(1), [])
        s.cancel_scheduled(seq)
        self.assertEqual(r.peek(1), [])

    def test_receive_and_delete(self):
        q = self.queue()
        self.client.sender(q).send("once")
        got = self.client.receiver(q, "receive_and_delete").receive(1)
        self.assertEqual((got[0].body_text(), got[0].lock_token), ("once", None))
        with self.assertRaises(ValueError):
            self.client.receiver(q).complete(got[0])
        self.assertEqual(self.client.receiver(q).peek(1), [])

    def test_transaction(self):
        q = self.queue()
        s = self.client.sender(q)
        try:
            with self.client.transaction():
                s.send("rolled back")
                raise RuntimeError("no")
        except RuntimeError:
            pass
        self.assertEqual(self.client.receiver(q).peek(1), [])


class SessionSettings(Base):
    """DateStyle and IntervalStyle change how the server writes times and intervals as
    text; whatever they are, the client reads the same values (a receive that failed
    to read its rows would have taken the messages already)."""

    STYLES = [("SQL, DMY", "iso_8601"), ("German", "sql_standard"),
              ("Postgres, MDY", "postgres_verbose")]

    def check_client(self, c):
        q = self.queue(lock_duration=30)
        self.client.sender(q).send_batch(["a", "b"], time_to_live=3600)
        expected = self.client.receiver(q).peek(2)
        times = lambda m: (m.sequence_number, m.enqueued_time, m.expires_at, m.time_to_live)  # noqa: E731
        got = c.receiver(q, "receive_and_delete").receive(1)
        self.assertEqual([times(m) for m in got], [times(expected[0])])
        self.assertEqual(times(got[0])[3], datetime.timedelta(hours=1))
        locked = c.receiver(q).receive(1)[0]
        self.assertEqual((locked.enqueued_time, locked.time_to_live),
                         (expected[1].enqueued_time, datetime.timedelta(hours=1)))
        self.assertIsInstance(c.receiver(q).renew(locked), datetime.datetime)
        t = qname("pyt")
        self.topics.append(t)
        created = c.create_topic(t, default_message_ttl=90, duplicate_detection_window=600)
        self.assertEqual((created["default_message_ttl"], created["duplicate_detection_window"]),
                         (datetime.timedelta(seconds=90), datetime.timedelta(minutes=10)))
        self.assertEqual(c.get_topic(t), self.client.get_topic(t))

    def test_styles_from_the_connection(self):
        for datestyle, intervalstyle in self.STYLES:
            with self.subTest(datestyle=datestyle, intervalstyle=intervalstyle):
                opts = "-c DateStyle=%s -c IntervalStyle=%s" % (datestyle.replace(" ", "\\ "),
                                                               intervalstyle)
                with sbqueue.Client.connect(CONNINFO, options=opts) as c:
                    self.check_client(c)

    def test_styles_set_on_a_connection_handed_in(self):
        for datestyle, intervalstyle in self.STYLES:
            with self.subTest(datestyle=datestyle, intervalstyle=intervalstyle):
                with psycopg.connect(CONNINFO, autocommit=True) as conn:
                    conn.execute("SELECT set_config('DateStyle', %s, false),"
                                 " set_config('IntervalStyle', %s, false)",
                                 [datestyle, intervalstyle])
                    c = sbqueue.Client(conn)
                    self.check_client(c)
                    with c.transaction():
                        q = self.queue()
                        c.sender(q).send("in a transaction", time_to_live=60)
                        got = c.receiver(q).receive(1)[0]
                        self.assertEqual(got.time_to_live, datetime.timedelta(minutes=1))
                    # the caller's settings stay theirs
                    self.assertEqual(conn.execute("SHOW IntervalStyle").fetchone()[0],
                                     intervalstyle)


class TypedErrors(Base):
    def test_each_sqlstate(self):
        q = self.queue(max_message_size=1024)
        s, r = self.client.sender(q), self.client.receiver(q)
        cases = [
            (sbqueue.QueueNotFound, lambda: self.client.sender("no-such-" + q).send("x")),
            (sbqueue.MessageLockLost, lambda: r.complete(uuid.uuid4())),
            (sbqueue.MessageNotFound, lambda: r.receive_deferred([10 ** 12])),
            (sbqueue.QueueAlreadyExists, lambda: self.client.create_queue(q)),
            (sbqueue.MessageTooLarge, lambda: s.send(b"x" * 2000)),
            (sbqueue.InvalidOperation,
             lambda: self.client.dead_letter_receiver(q).dead_letter(self._dead_letter(q))),
            (sbqueue.InvalidArgument, lambda: r.receive(0)),
            (sbqueue.NullArgument, lambda: self.client.sender(None).send("x")),
        ]
        for cls, fn in cases:
            with self.subTest(cls=cls.__name__):
                with self.assertRaises(cls) as cm:
                    fn()
                self.assertEqual(cm.exception.sqlstate, cls.sqlstate)
                self.assertIsInstance(cm.exception.__cause__, psycopg.Error)
                self.assertEqual(cm.exception.__cause__.sqlstate, cls.sqlstate)

    def _dead_letter(self, q):
        s, r = self.client.sender(q), self.client.receiver(q)
        s.send("dl")
        r.dead_letter(r.receive(1))
        return self.client.dead_letter_receiver(q).receive(1)[0]

    def test_permission_denied(self):
        q = self.queue()
        role = "sbq_py_" + uuid.uuid4().hex[:8]
        self.client.conn.execute('CREATE ROLE "%s" LOGIN' % role)
        try:
            other = sbqueue.Client.connect(CONNINFO, user=role)
            try:
                with self.assertRaises(sbqueue.PermissionDenied):
                    other.sender(q).send("x")
            finally:
                other.close()
        finally:
            self.client.conn.execute('DROP ROLE "%s"' % role)


class Sessions(Base):
    def test_session_worker(self):
        q = self.queue(requires_session=True)
        s = self.client.sender(q)
        for i in range(3):
            for sid in ("a", "b"):
                s.send("%s%d" % (sid, i), session_id=sid)
        with self.assertRaises(sbqueue.InvalidArgument):
            s.send("no session")
        with self.assertRaises(sbqueue.InvalidOperation):
            self.client.receiver(q).receive(1)
        seen = {}
        last = None
        while True:
            session = self.client.accept_session(q)
            if session is None:
                break
            last = session
            with session:
                other = sbqueue.Client.connect(CONNINFO)
                try:
                    with self.assertRaises(sbqueue.SessionCannotBeLocked):
                        other.accept_session(q, session.session_id)
                finally:
                    other.close()
                state = session.get_state()
                self.assertIsNone(state)
                msgs = session.receive(10)
                seen[session.session_id] = [m.body_text() for m in msgs]
                session.complete(msgs)
                session.set_state(b"done")
                self.assertEqual(session.get_state(), b"done")
                self.assertGreater(session.renew_session(), datetime.datetime.now(datetime.timezone.utc))
        self.assertEqual(seen, {"a": ["a0", "a1", "a2"], "b": ["b0", "b1", "b2"]})
        with self.assertRaises(sbqueue.SessionLockLost):
            last.release()
        s.send("a9", session_id="a")
        s.send("b9", session_id="b")
        kept = self.client.accept_session(q, "a")
        self.assertEqual([m.body_text() for m in kept.peek(10)], ["a9"], "a session peeks its own")
        self.assertEqual(kept.get_state(), b"done")
        kept.set_state(None)
        kept.release()


class Topics(Base):
    """Topics, subscriptions and rules (sbqueue 0.10)."""

    def copies(self, msgs):
        """(body, subject, RuleName) of each message, sorted: the copies, exactly."""
        return sorted((m.body_text(), m.subject, (m.application_properties or {}).get("RuleName"))
                      for m in msgs)

    def test_fan_out_by_filters_and_actions(self):
        c = self.client
        t = self.topic()
        c.create_subscription(t, "eu")
        c.create_subscription(t, "corr")
        # eu: European orders over 100
        c.remove_rule(t, "eu", "$Default")
        c.add_rule(t, "eu", "big-eu", sql_filter="region = 'eu' AND amount > 100")
        # corr: a correlation filter, and a rule whose action marks a copy of its own
        c.remove_rule(t, "corr", "$Default")
        c.add_rule(t, "corr", "by-corr", correlation_filter={"correlation_id": "c1",
                                                            "properties": {"kind": "x"}})
        c.add_rule(t, "corr", "marked", sql_filter="kind = 'x'", action="SET sys.Subject = 'x'")
        s = c.topic_sender(t)
        self.assertEqual(s.queue, t)
        n1 = s.send("m1", subject="orig", correlation_id="c1",
                    application_properties={"region": "eu", "amount": 250, "kind": "x"})
        s.send("m2", application_properties={"region": "eu", "amount": 50})     # no one's
        s.send("m3", application_properties={"region": "us", "amount": 500, "kind": "x"})
        s.send("m4", correlation_id="c1", application_properties={"region": "eu", "amount": 101,
                                                                 "kind": "y"})
        self.assertIsInstance(n1, int)
        eu = c.subscription_receiver(t, "eu")
        self.assertEqual(eu.queue, "%s/subscriptions/eu" % t)
        self.assertEqual(eu.queue, sbqueue.subscription_address(t, "eu"))
        got = eu.receive(10)
        self.assertEqual(self.copies(got), [("m1", "orig", None), ("m4", None, None)])
        self.assertEqual(got[0].application_properties, {"region": "eu", "amount": 250, "kind": "x"})
        corr = c.subscription_receiver(t, "corr", receive_mode="receive_and_delete")
        taken = corr.receive(10)
        self.assertEqual(self.copies(taken), [("m1", "orig", None), ("m1", "x", "marked"),
                                              ("m3", "x", "marked")])
        self.assertEqual({m.lock_token for m in taken}, {None}, "received and deleted")
        self.assertEqual(corr.peek(10), [])
        self.assertEqual(c.topic_stats(t), {"topic": t, "subscription_count": 2, "sent": 4,
                                            "dropped": 1})
        other = self.topic()
        c.sender(other).send_batch(["x", "y"])    # no subscription: both dropped
        self.assertEqual(c.topic_stats(other), {"topic": other, "subscription_count": 0,
                                                "sent": 2, "dropped": 2})
        self.assertEqual(c.topic_stats(t)["sent"], 4)
        # settle on a subscription; its dead-letter receiver
        first, second = sorted(got, key=lambda m: m.body_text())
        self.assertEqual(eu.complete(first), 1)
        eu.dead_letter(second, "bad", "m4 was bad")
        self.assertEqual(eu.peek(10), [])
        dlq = c.subscription_dead_letter_receiver(t, "eu")
        self.assertEqual(dlq.queue, "%s/subscriptions/eu/$deadletterqueue" % t)
        stats = c.queue_stats(sbqueue.subscription_address(t, "eu"))
        self.assertEqual((stats["sent"], stats["completed"], stats["dead_lettered"],
                          stats["dead_letter_count"]), (2, 1, 1, 1))
        dead = dlq.receive(10)
        self.assertEqual([(m.body_text(), m.dead_letter_reason, m.dead_letter_error_description)
                          for m in dead], [("m4", "bad", "m4 was bad")])
        self.assertEqual(dlq.complete(dead), 1)
        self.assertEqual(dlq.peek(10), [])

    def test_filter_errors_dead_letter_the_copy(self):
        c = self.client
        t = self.topic()
        c.create_subscription(t, "strict")
        c.remove_rule(t, "strict", "$Default")
        c.add_rule(t, "strict", "div", sql_filter="amount / 0 > 1")
        c.sender(t).send("boom", application_properties={"amount": 5})
        self.assertEqual(c.subscription_receiver(t, "strict").peek(10), [])
        dead = c.subscription_dead_letter_receiver(t, "strict").receive(10)
        self.assertEqual([(m.body_text(), m.dead_letter_reason) for m in dead],
                         [("boom", "FilterException")])
        self.assertTrue(dead[0].dead_letter_error_description)

    def test_management_round_trips(self):
        c = self.client
        t = qname("pyt")
        self.topics.append(t)
        created = c.create_topic(t, default_message_ttl=3600, duplicate_detection_window=60,
                                 max_message_size=2048)
        self.assertEqual((created["topic"], created["default_message_ttl"],
                          created["duplicate_detection_window"], created["max_message_size"]),
                         (t, datetime.timedelta(hours=1), datetime.timedelta(minutes=1), 2048))
        self.assertEqual(c.get_topic(t), created)
        self.assertEqual(c.get_topic(t.upper())["topic"], t, "names in any letter case")
        updated = c.update_topic(t, max_message_size=4096)
        self.assertEqual((updated["max_message_size"], updated["default_message_ttl"]),
                         (4096, datetime.timedelta(hours=1)))
        self.assertEqual(c.get_topic(t), updated)
        self.assertIn(updated, c.topics())
        sub = c.create_subscription(t, "s1", lock_duration=45, max_delivery_count=3,
                                    dead_lettering_on_filter_evaluation_exceptions=False)
        self.assertEqual((sub["topic"], sub["subscription"], sub["lock_duration"],
                          sub["max_delivery_count"],
                          sub["dead_lettering_on_filter_evaluation_exceptions"]),
                         (t, "s1", datetime.timedelta(seconds=45), 3, False))
        self.assertEqual(c.get_subscription(t, "s1"), sub)
        sub = c.update_subscription(t, "s1", max_delivery_count=7,
                                    default_message_ttl=datetime.timedelta(minutes=5))
        self.assertEqual((sub["max_delivery_count"], sub["default_message_ttl"],
                          sub["lock_duration"]),
                         (7, datetime.timedelta(minutes=5), datetime.timedelta(seconds=45)))
        self.assertEqual(c.get_subscription(t, "S1"), sub)
        c.create_subscription(t, "s2", requires_session=True)
        other = self.topic()                      # its subscription and rules are not t's
        c.create_subscription(other, "s1")
        self.assertEqual([x["subscription"] for x in c.subscriptions(t)], ["s1", "s2"])
        self.assertEqual(c.subscriptions(t)[0], sub)
        q = self.queue()
        self.assertEqual(c.update_subscription(t, "s1", forward_to=q)["forward_to"], q)
        self.assertIsNone(c.update_subscription(t, "s1", forward_to="")["forward_to"])
        # rules
        self.assertEqual([(r["rule"], r["filter_type"], r["filter"], r["action"])
                          for r in c.rules(t, "s1")], [("$Default", "true", "1=1", None)])
        corr = {"subject": "x", "properties": {"n": 1, "k": "v"}}
        c.add_rule(t, "s1", "c", correlation_filter=corr)
        c.add_rule(t, "s1", "q", sql_filter="n > 1", action="SET k = 'w'")
        c.add_rule(t, "s1", "a", action="REMOVE k")
        rules = c.rules(t.upper(), "S1")
        self.assertEqual([(r["topic"], r["subscription"], r["rule"], r["filter_type"], r["filter"],
                           r["action"]) for r in rules],
                         [(t, "s1", "$Default", "true", "1=1", None),
                          (t, "s1", "c", "correlation", corr, None),
                          (t, "s1", "q", "sql", "n > 1", "SET k = 'w'"),
                          (t, "s1", "a", "true", "1=1", "REMOVE k")])
        c.remove_rule(t, "s1", "$Default")
        c.remove_rule(t, "s1", "c")
        self.assertEqual([r["rule"] for r in c.rules(t, "s1")], ["q", "a"])
        with self.assertRaises(sbqueue.EntityNotFound):
            c.remove_rule(t, "s1", "c")
        with self.assertRaises(sbqueue.EntityNotFound):
            c.rules(t, "no-such")
        c.delete_subscription(t, "s2")
        with self.assertRaises(sbqueue.EntityNotFound):
            c.get_subscription(t, "s2")
        self.assertEqual([x["subscription"] for x in c.subscriptions(t)], ["s1"])
        c.delete_topic(t)
        for call in (lambda: c.get_topic(t), lambda: c.topic_stats(t),
                     lambda: c.subscriptions(t), lambda: c.get_subscription(t, "s1"),
                     lambda: c.delete_topic(t)):
            with self.assertRaises(sbqueue.EntityNotFound):
                call()
        self.assertNotIn(t, [x["topic"] for x in c.topics()])

    def test_duplicate_detection_is_the_topics(self):
        c = self.client
        t = self.topic(duplicate_detection_window=60)
        c.create_subscription(t, "all")
        s = c.topic_sender(t)
        n = s.send("one", message_id="m1")
        self.assertEqual(s.send("again", message_id="m1"), n)
        self.assertEqual([m.body_text() for m in c.subscription_receiver(t, "all").peek(10)],
                         ["one"])
        self.assertEqual(c.topic_stats(t)["sent"], 1)

    def test_typed_errors(self):
        c = self.client
        t = self.topic()
        c.create_subscription(t, "s")
        with self.assertRaises(sbqueue.InvalidArgument) as cm:
            c.add_rule(t, "s", "bad", sql_filter="region = = 1")
        self.assertIn("invalid SQL filter", str(cm.exception))
        self.assertEqual(cm.exception.detail, "The error is at character 10 of the filter.")
        with self.assertRaises(sbqueue.InvalidArgument) as cm:
            c.add_rule(t, "s", "bad", action="SET")
        self.assertIn("invalid rule action", str(cm.exception))
        self.assertEqual(cm.exception.detail, "The error is at character 4 of the action.")
        self.assertEqual([r["rule"] for r in c.rules(t, "s")], ["$Default"], "nothing added")
        # a limit: 2,000 SQL filters per topic (made in one statement, to be quick)
        c.conn.execute("SELECT count(sbq_add_rule(%s, 's', 'r' || i, sql_filter => 'n = ' || i))"
                       " FROM generate_series(1, 2000) i", (t,))
        cases = [
            (sbqueue.InvalidOperation, lambda: c.receiver(t).receive(1)),          # a topic
            (sbqueue.InvalidOperation, lambda: c.receiver(t).peek(1)),
            (sbqueue.InvalidOperation,
             lambda: c.sender(sbqueue.subscription_address(t, "s")).send("x")),
            (sbqueue.InvalidOperation, lambda: c.delete_queue(sbqueue.subscription_address(t, "s"))),
            (sbqueue.QueueNotFound, lambda: c.subscription_receiver(t, "no-such").receive(1)),
            (sbqueue.EntityNotFound, lambda: c.create_subscription("no-such-" + t, "s")),
            (sbqueue.EntityNotFound, lambda: c.add_rule(t, "no-such", "r")),
            (sbqueue.QueueAlreadyExists, lambda: c.create_topic(t)),
            (sbqueue.QueueAlreadyExists, lambda: c.create_queue(t)),
            (sbqueue.QueueAlreadyExists, lambda: c.create_subscription(t, "s")),
            (sbqueue.QueueAlreadyExists, lambda: c.add_rule(t, "s", "$Default")),
            (sbqueue.InvalidArgument, lambda: c.add_rule(t, "s", "two", sql_filter="1=1",
                                                         correlation_filter={"subject": "x"})),
            (sbqueue.InvalidArgument, lambda: c.update_subscription(
                t, "s", duplicate_detection_window=60)),
            (sbqueue.InvalidArgument, lambda: c.create_subscription(
                t, "f", forward_dead_lettered_messages_to=t)),
            (sbqueue.QuotaExceeded, lambda: c.add_rule(t, "s", "one-more", sql_filter="n = 0")),
        ]
        for cls, fn in cases:
            with self.subTest(cls=cls.__name__):
                with self.assertRaises(cls) as cm:
                    fn()
                self.assertEqual(cm.exception.sqlstate, cls.sqlstate)
                self.assertEqual(cm.exception.__cause__.sqlstate, cls.sqlstate)
        # 0A000 comes only from a database whose SQL is older than the call needs
        self.assertIs(sbqueue.errors.BY_SQLSTATE["0A000"], sbqueue.NotSupported)

    def test_trying_rules_out(self):
        c = self.client
        big_eu = "region = 'eu' AND amount > 100"
        self.assertIs(c.test_filter(big_eu, "x", application_properties={"region": "eu",
                                                                          "amount": 250}), True)
        self.assertIs(c.test_filter(big_eu, "x", application_properties={"region": "eu",
                                                                          "amount": 50}), False)
        self.assertIsNone(c.test_filter(big_eu, "x"), "unknown: no such properties")
        self.assertIs(c.test_filter("sys.Label = 's' AND sys.ContentType = 'application/json'",
                                    {"a": 1}, subject="s"), True)
        with self.assertRaises(sbqueue.InvalidArgument) as cm:
            c.test_filter("amount > 'a'", "x", application_properties={"amount": 1})
        self.assertIn("FilterException", cm.exception.detail)
        with self.assertRaises(sbqueue.InvalidArgument) as cm:
            c.test_filter("amount > = 1")
        self.assertEqual(cm.exception.detail, "The error is at character 10 of the filter.")
        m = c.test_action("SET sys.Subject = 'x'; SET n = n + 1; REMOVE k", "hi",
                          application_properties={"n": 1, "k": 2}, time_to_live=60)
        self.assertIsInstance(m, sbqueue.OutgoingMessage)
        self.assertEqual((m.body, m.subject, m.application_properties, m.time_to_live,
                          m.content_type, m.message_id),
                         (b"hi", "x", {"n": 2}, datetime.timedelta(seconds=60),
                          "text/plain; charset=utf-8", None))
        with self.assertRaises(sbqueue.InvalidArgument) as cm:
            c.test_action("SET", "x")
        self.assertEqual(cm.exception.detail, "The error is at character 4 of the action.")
        q = self.queue()                        # what it gives sends as it is
        c.sender(q).send_messages([m])
        got = c.receiver(q).peek(1)[0]
        self.assertEqual((got.body_text(), got.subject, got.application_properties),
                         ("hi", "x", {"n": 2}))

    def test_sessions_on_a_subscription(self):
        c = self.client
        t = self.topic()
        c.create_subscription(t, "fifo", requires_session=True)
        s = c.sender(t)
        for i in range(2):
            for sid in ("a", "b"):
                s.send("%s%d" % (sid, i), session_id=sid)
        s.send("none")            # no session id: dead-lettered in the subscription
        with self.assertRaises(sbqueue.InvalidOperation):
            c.subscription_receiver(t, "fifo").receive(1)
        seen = {}
        with c.accept_subscription_session(t, "fifo", "b") as session:
            self.assertEqual(session.queue, sbqueue.subscription_address(t, "fifo"))
            msgs = session.receive(10)
            seen["b"] = [m.body_text() for m in msgs]
            session.complete(msgs)
            session.set_state(b"done")
            self.assertEqual(session.get_state(), b"done")
        with c.accept_subscription_session(t, "fifo") as session:   # the next one
            msgs = session.receive(10)
            seen[session.session_id] = [m.body_text() for m in msgs]
            session.complete(msgs)
        self.assertEqual(seen, {"a": ["a0", "a1"], "b": ["b0", "b1"]})
        self.assertIsNone(c.accept_subscription_session(t, "fifo"))
        dead = c.subscription_dead_letter_receiver(t, "fifo").peek(10)
        self.assertEqual([(m.body_text(), m.dead_letter_reason) for m in dead],
                         [("none", "Session id is null.")])

    def test_processor_over_a_subscription(self):
        c = self.client
        t = self.topic()
        c.create_subscription(t, "work")
        c.create_subscription(t, "other")
        c.remove_rule(t, "other", "$Default")
        c.add_rule(t, "other", "none", sql_filter="1 = 0")
        done = []
        lock = threading.Lock()

        def handle(msg):
            with lock:
                done.append(msg.body_text())
        p = sbqueue.Processor(CONNINFO, sbqueue.subscription_address(t, "work"), handle,
                              concurrency=2, max_wait=0.5).start()
        try:
            c.sender(t).send_batch(["a", "b", "c"])
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and p.settled["complete"] < 3:
                time.sleep(0.05)
        finally:
            p.stop(wait=True, timeout=10)
        self.assertEqual(sorted(done), ["a", "b", "c"])
        self.assertEqual(p.settled["complete"], 3)
        self.assertEqual(c.subscription_receiver(t, "work").peek(10), [])
        self.assertEqual(c.topic_stats(t)["dropped"], 0)


class Console(Base):
    """The sbq command (python3 -m sbqueue)."""

    def sbq(self, *args, stdin=None):
        env = dict(os.environ, PYTHONPATH=os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
        # cwd comes first on sys.path for -m: not a directory where the extension's
        # sbqueue.so may lie
        p = subprocess.run([sys.executable, "-m", "sbqueue", *args], input=stdin, env=env,
                           capture_output=True, text=True, timeout=60,
                           cwd=os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
        return p.returncode, p.stdout, p.stderr

    def test_commands(self):
        import json
        q = self.queue(max_delivery_count=1)
        rc, out, err = self.sbq("send", q, "hello", "--subject", "s")
        self.assertEqual((rc, out.strip().isdigit()), (0, True), err)
        rc, out, _ = self.sbq("--json", "send", q, "-", "--json-body", stdin='{"a": 1}')
        seq2 = json.loads(out)["sequence_number"]
        rc, out, _ = self.sbq("--json", "peek", q, "-n", "5")
        peeked = json.loads(out)
        self.assertEqual([(m["body"], m["subject"]) for m in peeked], [("hello", "s"), ('{"a": 1}', None)])
        self.assertEqual(peeked[1]["sequence_number"], seq2)
        self.client.sender(q).send(bytes([0xff, 0]))
        rc, out, _ = self.sbq("--json", "peek", q, "-n", "5")
        self.assertEqual(json.loads(out)[2]["body_base64"], "/wA=")
        rc, out, _ = self.sbq("--json", "receive", q, "-n", "1", "--peek-lock")
        locked = json.loads(out)[0]
        self.assertIsNotNone(locked["lock_token"])
        self.client.receiver(q).dead_letter(locked["lock_token"])
        rc, out, _ = self.sbq("--json", "stats", q)
        stats = json.loads(out)[0]
        self.assertEqual((stats["active_count"], stats["dead_letter_count"]), (2, 1))
        rc, out, _ = self.sbq("--json", "resubmit", q)
        self.assertEqual(json.loads(out), {"resubmitted": 1})
        rc, out, _ = self.sbq("--json", "receive", q, "-n", "10")
        self.assertEqual(len(json.loads(out)), 3, "receive-and-delete took all three")
        self.client.sender(q).send("x")
        rc, out, _ = self.sbq("purge", q)
        self.assertEqual((rc, out.strip()), (0, "1"))
        rc, out, err = self.sbq("peek", "no-such-" + q)
        self.assertEqual(rc, 1)
        self.assertIn("SQLSTATE SB001", err)

    def test_stats_in_any_letter_case(self):
        import json
        q = qname("Py-Case")
        self.client.create_queue(q)
        self.queues.append(q)
        self.client.sender(q.lower()).send("x")
        for name in (q, q.upper(), q.lower()):
            self.assertEqual(self.client.queue_stats(name)["active_count"], 1, name)
            rc, out, err = self.sbq("--json", "stats", name)
            self.assertEqual((rc, json.loads(out or "[{}]")[0].get("queue")), (0, q), err)
        t = self.topic()
        self.client.create_subscription(t, "Sub1")
        address = sbqueue.subscription_address(t.upper(), "SUB1")
        self.assertEqual(self.client.queue_stats(address)["queue"],
                         sbqueue.subscription_address(t, "Sub1"))
        self.assertIsNone(self.client.queue_stats("no-such-" + q))

    def test_json_body_is_jsonb_whatever_the_json(self):
        import json
        from psycopg.types.json import Jsonb
        q = self.queue()
        for body in ('"a JSON string"', '{"a": 1}', '42', 'null'):
            rc, _, err = self.sbq("send", q, body, "--json-body")
            self.assertEqual(rc, 0, err)
        self.client.sender(q).send(Jsonb("sent as jsonb"))
        got = self.client.receiver(q).peek(10)
        self.assertEqual([(m.content_type, m.body_json()) for m in got],
                         [("application/json", v) for v in ("a JSON string", {"a": 1}, 42, None,
                                                            "sent as jsonb")])
        self.assertEqual(json.loads(got[0].body), "a JSON string")

    def test_errors_not_sbqueues_print_their_sqlstate(self):
        rc, _, err = self.sbq("--schema", "no_such_schema", "stats")
        self.assertEqual(rc, 1)
        self.assertIn("(SQLSTATE 42P01)", err)


class Cancel(Base):
    def test_waiting_receive_cancelled_quickly(self):
        q = self.queue()
        r = self.client.receiver(q)
        out = {}

        def wait():
            t = time.monotonic()
            out["got"] = r.receive(1, max_wait=30)
            out["ended"] = time.monotonic()
        th = threading.Thread(target=wait)
        th.start()
        time.sleep(0.5)
        asked = time.monotonic()
        self.assertTrue(self.client.cancel())
        th.join(5)
        self.assertEqual(out["got"], [])
        self.assertLess(out["ended"] - asked, 0.1)
        # the connection is usable afterwards
        self.client.sender(q).send("after")
        self.assertEqual(r.receive(1)[0].body_text(), "after")

    def _cancel_soon(self, client, delay=0.3):
        t = threading.Timer(delay, client.cancel)
        t.start()
        return t

    def test_cancel_inside_a_transaction_raises(self):
        q = self.queue()
        other = self.queue()
        sq = self.queue(requires_session=True)
        for call in (lambda: self.client.receiver(q).receive(1, max_wait=30),
                     lambda: self.client.accept_session(sq, max_wait=30)):
            with self.subTest(call=call):
                self._cancel_soon(self.client)
                with self.assertRaises(psycopg.errors.QueryCanceled):
                    with self.client.transaction():
                        self.client.sender(other).send("in the transaction")
                        call()
                self.assertEqual(self.client.receiver(other).peek(1), [],
                                 "the transaction's send was rolled back, and said so")

    def test_statement_timeout_is_not_a_cancel(self):
        q = self.queue()
        self.client.conn.execute("SET statement_timeout = '300ms'")
        try:
            with self.assertRaises(psycopg.errors.QueryCanceled):
                self.client.receiver(q).receive(1, max_wait=5)
        finally:
            self.client.conn.execute("RESET statement_timeout")

    def test_pending_cancel(self):
        q = self.queue()
        self.assertFalse(self.client.cancel(pending=True))
        t = time.monotonic()
        self.assertEqual(self.client.receiver(q).receive(1, max_wait=10), [])
        self.assertLess(time.monotonic() - t, 1)
        self.client.sender(q).send("x")
        self.assertEqual(len(self.client.receiver(q).receive(1, max_wait=10)), 1,
                         "a pending cancel ends one wait only")


class Readme(Base):
    def test_first_example_runs_as_written(self):
        """The README's first example, in a database of its own (it names its queues
        "orders" and so on), with only its conninfo changed."""
        import re
        readme = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "README.md")
        with open(readme, encoding="utf-8") as f:
            code = re.search(r"```python\n(.*?)```", f.read(), re.S).group(1)
        db = "sbq_readme_" + uuid.uuid4().hex[:8]
        self.client.conn.execute("CREATE DATABASE %s" % db)
        try:
            with psycopg.connect(CONNINFO, dbname=db, autocommit=True) as conn:
                conn.execute("CREATE EXTENSION sbqueue")
            conninfo = psycopg.conninfo.make_conninfo(CONNINFO, dbname=db)
            code = code.replace('"dbname=app"', repr(conninfo))
            self.assertIn(repr(conninfo), code)
            env = dict(os.environ, PYTHONPATH=os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
            p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                               timeout=60, cwd=os.path.dirname(os.path.abspath(__file__)))
            self.assertEqual(p.returncode, 0, p.stderr)
            with sbqueue.Client.connect(conninfo) as c:
                self.assertEqual(c.queue_stats("orders-fifo")["active_count"], 0,
                                 "the session's message was received and completed")
        finally:
            self.client.conn.execute("DROP DATABASE %s WITH (FORCE)" % db)


class ProcessorTests(Base):
    def test_a_failed_start_leaves_nothing_running(self):
        q = self.queue()
        role = "sbq_py_" + uuid.uuid4().hex[:8]
        self.client.conn.execute("CREATE ROLE %s LOGIN CONNECTION LIMIT 2" % role)
        try:
            handled = []
            p = sbqueue.Processor(CONNINFO, q, lambda m: handled.append(m.body_text()),
                                  concurrency=3, max_wait=1, renew_locks=False, user=role)
            with self.assertRaises(psycopg.OperationalError):
                p.run(install_signal_handlers=False)
            self.assertEqual([t.name for t in p._threads if t.is_alive()], [])
            self.client.sender(q).send("after the failure")
            time.sleep(1.5)
            self.assertEqual(handled, [])
            n = self.client.conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE usename = %s", [role]).fetchone()[0]
            self.assertEqual(n, 0, "its connections are closed")
        finally:
            for _ in range(50):
                try:
                    self.client.conn.execute("DROP ROLE %s" % role)
                    break
                except psycopg.errors.ObjectInUse:
                    time.sleep(0.1)

    def test_handlers_slower_than_the_lock(self):
        q = self.queue(lock_duration=datetime.timedelta(seconds=5))
        n = 4
        self.client.sender(q).send_batch([str(i) for i in range(n)])
        seen = []
        lock = threading.Lock()

        def handle(msg):
            time.sleep(6)                    # longer than the lock: renewal keeps it
            with lock:
                seen.append((msg.body_text(), msg.delivery_count))
            return None
        p = sbqueue.Processor(CONNINFO, q, handle, concurrency=4, max_wait=1).start()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and p.settled["complete"] < n:
            time.sleep(0.1)
        p.stop(wait=True, timeout=10)
        self.assertEqual(sorted(b for b, _ in seen), sorted(str(i) for i in range(n)))
        self.assertEqual({c for _, c in seen}, {1}, "each delivered once")
        self.assertEqual(p.settled["complete"], n)
        self.assertEqual(p.settled["lost"], 0)
        self.assertGreater(p.renewals, 0)
        self.assertEqual(self.client.receiver(q).peek(10), [])

    def test_settle_by_result_and_exception(self):
        q = self.queue(max_delivery_count=2)
        self.client.sender(q).send_batch(["ok", "fail", "dl", "defer"])

        def handle(msg):
            body = msg.body_text()
            if body == "fail":
                raise RuntimeError("boom")
            if body == "dl":
                raise sbqueue.DeadLetter("poison", "it said dl")
            if body == "defer":
                return "defer"
            return None
        errs = []
        p = sbqueue.Processor(CONNINFO, q, handle, concurrency=2, max_wait=0.5,
                              on_error=lambda m, e: errs.append(str(e))).start()
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and sum(p.settled.values()) < 5:
            time.sleep(0.1)
        p.stop(wait=True, timeout=10)
        # "fail" is abandoned twice, and its second abandon dead-letters it
        self.assertEqual((p.settled["complete"], p.settled["abandon"], p.settled["deadletter"],
                          p.settled["defer"]), (1, 2, 1, 1))
        self.assertEqual(errs, ["boom", "boom"])
        dls = {m.body_text(): m for m in self.client.dead_letter_receiver(q).peek(10)}
        self.assertEqual(dls["dl"].dead_letter_reason, "poison")
        self.assertEqual(dls["fail"].dead_letter_reason, "MaxDeliveryCountExceeded")
        self.assertEqual([m.state for m in self.client.receiver(q).peek(10)], ["deferred"])

    def test_stop_ends_waiting_receives_at_once(self):
        q = self.queue()
        p = sbqueue.Processor(CONNINFO, q, lambda m: None, concurrency=3, max_wait=30).start()
        time.sleep(0.5)
        t = time.monotonic()
        p.stop(wait=True, timeout=20)
        self.assertLess(time.monotonic() - t, 2, "stop waited for the receives' max_wait")

    def test_stop_at_any_moment_leaves_nothing_locked(self):
        q = self.queue()
        self.client.sender(q).send_batch([str(i) for i in range(2000)])
        for i in range(10):
            p = sbqueue.Processor(CONNINFO, q, lambda m: None, concurrency=3, max_wait=1).start()
            time.sleep(0.05 + (i % 5) * 0.04)
            p.stop(wait=True, timeout=20)
            self.assertEqual(p.settled["failed"] + p.settled["lost"], 0, p.settled)
            now = datetime.datetime.now(datetime.timezone.utc)
            locked = [m.sequence_number for m in self.client.receiver(q).peek(5000)
                      if m.locked_until is not None and m.locked_until > now]
            self.assertEqual(locked, [], "round %d left messages locked" % i)

    def test_survives_terminated_connections(self):
        q = self.queue()
        app = "sbq-py-" + uuid.uuid4().hex[:8]
        done = []
        p = sbqueue.Processor(CONNINFO, q, lambda m: done.append(m.body_text()), concurrency=2,
                              max_wait=1, application_name=app).start()
        try:
            time.sleep(0.5)
            killed = self.client.conn.execute(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
                " WHERE application_name = %s", (app,)).fetchone()[0]
            self.assertEqual(killed, 3, "two handler connections and the renewer's")
            self.client.sender(q).send_batch(["a", "b", "c"])
            deadline = time.monotonic() + 15
            while time.monotonic() < deadline and len(done) < 3:
                time.sleep(0.1)
        finally:
            p.stop(wait=True, timeout=10)
        self.assertEqual(sorted(done), ["a", "b", "c"])

    def test_sigterm_finishes_in_flight(self):
        q = self.queue(lock_duration=datetime.timedelta(seconds=5))
        n = 40
        self.client.sender(q).send_batch([str(i) for i in range(n)])
        self.client.conn.execute("CREATE TABLE IF NOT EXISTS sbq_py_done (queue text, body text)")
        script = textwrap.dedent("""
            import sys, time
            sys.path.insert(0, %r)
            import psycopg, sbqueue
            conn = psycopg.connect(%r, autocommit=True)
            def handle(msg):
                time.sleep(0.2)
                conn_local = psycopg.connect(%r, autocommit=True)
                conn_local.execute("INSERT INTO sbq_py_done VALUES (%%s, %%s)", (%r, msg.body_text()))
                conn_local.close()
            print("ready", flush=True)
            sbqueue.Processor(%r, %r, handle, concurrency=4, max_wait=5).run()
            print("stopped", flush=True)
        """) % (os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."), CONNINFO,
                CONNINFO, q, CONNINFO, q)
        proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        self.assertEqual(proc.stdout.readline().strip(), "ready")
        time.sleep(1.0)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=20)
        self.assertEqual(proc.returncode, 0, err)
        self.assertIn("stopped", out)
        done = [r[0] for r in self.client.conn.execute(
            "SELECT body FROM sbq_py_done WHERE queue = %s", (q,)).fetchall()]
        left = [m.body_text() for m in self.client.receiver(q).peek(100)]
        self.assertGreater(len(done), 0)
        self.assertLess(len(done), n, "stopped before the end")
        self.assertEqual(len(done), len(set(done)), "nothing handled twice")
        self.assertEqual(sorted(done + left, key=int), [str(i) for i in range(n)],
                         "nothing lost: every message handled once or still there")
        peeked = self.client.receiver(q).peek(100)
        locked = [m for m in peeked if m.locked_until is not None
                  and m.locked_until > datetime.datetime.now(datetime.timezone.utc)]
        self.assertEqual(locked, [], "nothing left locked: in-flight messages were settled")
        self.assertEqual([m.body_text() for m in peeked if m.delivery_count > 0], [],
                         "the handlers in flight finished: nothing was abandoned")


if __name__ == "__main__":
    unittest.main()
