"""Senders and receivers over one psycopg 3 connection.

    with sbqueue.Client.connect("dbname=app") as client:
        client.sender("orders").send({"id": 42}, subject="created")
        receiver = client.receiver("orders")
        for msg in receiver.receive(max_messages=10, max_wait=5):
            ...
            receiver.complete(msg)

A topic is sent to as a queue is (client.sender(topic)); each of its subscriptions is
received from as a queue, at its address "<topic>/subscriptions/<name>"
(client.subscription_receiver(topic, name)).

A Client owns one connection in autocommit mode: each call is a transaction of its
own, unless it runs inside `with client.transaction():`, which commits (or rolls
back) what the calls in it did together, as sbqueue's calls commit with the
caller's transaction. Tokens may be given as a ReceivedMessage, a uuid.UUID or a
string; bodies as str (text), bytes (bytea) or anything JSON can hold (jsonb).
Errors come as sbqueue.errors' typed exceptions.
"""

import datetime
import json
import threading
import uuid
from typing import Iterable, List, Optional, Sequence, Union

import psycopg
from psycopg import sql
from psycopg.types.json import Jsonb

from .errors import typed_errors
from .message import SELECT_LIST, OutgoingMessage, ReceivedMessage, Settled

Token = Union[ReceivedMessage, uuid.UUID, str]
Seconds = Union[int, float, datetime.timedelta]

SEND_OPTIONS = ("message_id", "session_id", "correlation_id", "subject", "content_type",
                "reply_to", "reply_to_session_id", "to_address", "time_to_live",
                "scheduled_enqueue_time", "application_properties")


# the options of the management calls that are intervals (seconds or a timedelta)
INTERVAL_SUFFIXES = ("duration", "ttl", "window", "delay")


def subscription_address(topic: str, subscription: str) -> str:
    """The name a subscription is received from, peeked at, settled on, counted in
    sbq_queue_stats by, and processed by (Processor): "<topic>/subscriptions/<name>"."""
    return "%s/subscriptions/%s" % (topic, subscription)


def _interval(value: Optional[Seconds]) -> Optional[datetime.timedelta]:
    if value is None or isinstance(value, datetime.timedelta):
        return value
    return datetime.timedelta(seconds=value)


def _token(value: Token) -> uuid.UUID:
    if isinstance(value, ReceivedMessage):
        if value.lock_token is None:
            raise ValueError("message %d has no lock token (peeked, or received and deleted)"
                             % value.sequence_number)
        return value.lock_token
    if isinstance(value, uuid.UUID):
        return value
    return uuid.UUID(str(value))


def _tokens(values) -> List[uuid.UUID]:
    if isinstance(values, (ReceivedMessage, uuid.UUID, str)):
        return [_token(values)]
    return [_token(v) for v in values]


def _entity_options(options) -> dict:
    """A management call's options, its intervals as timedeltas."""
    return {k: (_interval(v) if k.endswith(INTERVAL_SUFFIXES) else v) for k, v in options.items()}


def _rule(row: dict) -> dict:
    """A row of sbq_rules, a correlation filter as a dict (as add_rule takes it)."""
    if row.get("filter_type") == "correlation" and isinstance(row.get("filter"), str):
        row["filter"] = json.loads(row["filter"])
    return row


def _body(body):
    """(the value to pass, its SQL type) for a body. A psycopg Jsonb is jsonb whatever
    it holds: the way to send a JSON string, which as a str would be text."""
    if isinstance(body, Jsonb):
        return body, "jsonb"
    if isinstance(body, str):
        return body, "text"
    if isinstance(body, (bytes, bytearray, memoryview)):
        return bytes(body), "bytea"
    return Jsonb(body), "jsonb"


class Client:
    """One connection to a database where sbqueue is installed. Use it from one thread
    at a time (a connection runs one statement at a time, and a transaction opened by
    one caller would take in another's calls); cancel() is the one call another thread
    may make. Threads that work at once each want a Client of their own."""

    def __init__(self, conn: psycopg.Connection, schema: Optional[str] = None):
        self.conn = conn
        self.schema = schema
        # the state of a call that waits, for cancel() from another thread
        self._cond = threading.Condition()
        self._waiting = 0         # the number of the call that waits now, or 0
        self._calls = 0
        self._cancelled = 0       # the number of the call a cancel was sent to
        self._pending = False

    @classmethod
    def connect(cls, conninfo: str = "", schema: Optional[str] = None, **kwargs) -> "Client":
        """A new connection (libpq's conninfo and keywords; PG* variables apply)."""
        conn = psycopg.connect(conninfo, autocommit=True, **kwargs)
        return cls(conn, schema)

    def close(self):
        self.conn.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def transaction(self):
        """A transaction around several calls (psycopg's Connection.transaction())."""
        return self.conn.transaction()

    # -- plumbing

    def _execute(self, query, params=None) -> psycopg.Cursor:
        """Runs a statement of the client's and asks for its rows in binary. psycopg
        reads timestamps and intervals sent as text only in DateStyle ISO and
        IntervalStyle postgres, and either may be set otherwise for the database, the
        role, the connection or later in the session; by then a receive has taken its
        messages. In binary they read the same whatever the settings are, and the
        session is left as it was (the connection may be the caller's)."""
        return self.conn.execute(query, params, binary=True)

    def _fn(self, name: str) -> sql.Composable:
        if self.schema:
            return sql.SQL("{}.{}").format(sql.Identifier(self.schema), sql.Identifier(name))
        return sql.Identifier(name)

    def _call(self, name: str, args: Sequence, kwargs=None, select=None, types=None):
        """Runs SELECT <select> FROM name(args, kw => v, ...); returns all rows."""
        query, params = self._query(name, args, kwargs, select, types)
        with typed_errors():
            return self._execute(query, params).fetchall()

    def _query(self, name, args, kwargs=None, select=None, types=None):
        """The statement of _call and its parameters."""
        kwargs = kwargs or {}
        types = types or {}
        parts = []
        params = []
        for i, value in enumerate(args):
            t = types.get(i)
            parts.append(sql.SQL("%s::" + t) if t else sql.SQL("%s"))
            params.append(value)
        for key, value in kwargs.items():
            t = types.get(key)
            parts.append(sql.SQL("{} => " + ("%s::" + t if t else "%s")).format(sql.Identifier(key)))
            params.append(value)
        query = sql.SQL("SELECT {} FROM {}({})").format(
            sql.SQL(select or "*"), self._fn(name), sql.SQL(", ").join(parts))
        return query, params

    def _record(self, name, args, kwargs=None, types=None) -> Optional[dict]:
        """The row a function returns (a record: sbq_topic_properties, ...) as a dict."""
        query, params = self._query(name, args, kwargs, types=types)
        with typed_errors():
            cur = self._execute(query, params)
            row = cur.fetchone()
            return dict(zip([c.name for c in cur.description], row)) if row else None

    def _rows(self, query: sql.Composable, params: Sequence) -> List[dict]:
        """The rows of a query (of sbqueue's views) as dicts. The calls that read a view
        for one topic or subscription LEFT JOIN it to sbq_get_topic or
        sbq_get_subscription: the name in any letter case, and EntityNotFound when there
        is none (a join whose view side is empty might never call the function)."""
        with typed_errors():
            cur = self._execute(query, params)
            names = [c.name for c in cur.description]
            return [dict(zip(names, row)) for row in cur.fetchall()]

    def _one(self, name, args, kwargs=None, types=None):
        rows = self._call(name, args, kwargs, types=types)
        return rows[0][0] if rows else None

    def _messages(self, name, args, kwargs=None, types=None, wait=False) -> List[ReceivedMessage]:
        if wait:
            rows = self._waiting_call(name, args, kwargs, SELECT_LIST, types)
        else:
            rows = self._call(name, args, kwargs, select=SELECT_LIST, types=types)
        return [ReceivedMessage.from_row(r) for r in rows or ()]

    def _waiting_call(self, name, args, kwargs, select, types):
        """_call for a call that may wait: None when cancel() ended it (or a pending
        cancel came first). A cancel is sent only while this call runs: cancel() holds
        the condition's lock while it sends one, and this call takes it before it is
        over, so a cancel never reaches a later statement (the server ignores one that
        finds it idle)."""
        with self._cond:
            if self._pending:
                self._pending = False
                return None
            self._calls += 1
            me = self._waiting = self._calls
        try:
            return self._call(name, args, kwargs, select=select, types=types)
        except psycopg.errors.QueryCanceled:
            with self._cond:
                ours = self._cancelled == me
            idle = self.conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
            if not ours or not idle:
                raise           # a statement_timeout, or a cancel inside a transaction
            return None
        finally:
            with self._cond:
                self._waiting = 0
                self._cond.notify_all()

    def cancel(self, pending: bool = False) -> bool:
        """From another thread: end the receive or accept of this client that waits (it
        returns nothing; inside a transaction it raises QueryCanceled, as the
        transaction is then aborted). False when none was waiting; then with pending,
        the next wait of this client returns nothing at once instead. (A Client is
        for one thread at a time; cancel() is the one call another thread may make.)"""
        with self._cond:
            me = self._waiting
            if not me:
                self._pending = pending
                return False
            self._cancelled = me
            # a cancel that reaches the server before the call's statement is lost:
            # send again until the call is over (for a while)
            for _ in range(40):
                self.conn.cancel()
                self._cond.wait(0.05)
                if self._waiting != me:
                    break
        return True

    # -- entities

    def create_queue(self, name: str, **options) -> None:
        """sbq_create_queue(name, option => value, ...): lock_duration, max_delivery_count,
        default_message_ttl, requires_session, ... (intervals as seconds or timedelta)."""
        self._call("sbq_create_queue", [name], _entity_options(options))

    def delete_queue(self, name: str) -> None:
        self._call("sbq_delete_queue", [name])

    def queue_stats(self, name: str) -> Optional[dict]:
        """The queue's (or subscription's) row of sbq_queue_stats, None when there is
        none. The name matches in any letter case, as in every other call: the view
        shows a name as it was created, and names compare by their lower-case form (of
        ASCII letters only, as lower() folds them under the C collation)."""
        with typed_errors():
            cur = self._execute(
                sql.SQL('SELECT * FROM {} WHERE pg_catalog.lower(queue COLLATE "C")'
                        ' OPERATOR(pg_catalog.=) pg_catalog.lower(%s::text COLLATE "C")'
                        ).format(self._fn("sbq_queue_stats")),
                [name])
            row = cur.fetchone()
            return dict(zip([c.name for c in cur.description], row)) if row else None

    def sender(self, queue: str) -> "Sender":
        return Sender(self, queue)

    def receiver(self, queue: str, receive_mode: str = "peek_lock") -> "Receiver":
        return Receiver(self, queue, receive_mode)

    def dead_letter_receiver(self, queue: str) -> "Receiver":
        return Receiver(self, queue + "/$deadletterqueue")

    def accept_session(self, queue: str, session_id: Optional[str] = None,
                       max_wait: Seconds = 0) -> Optional["SessionReceiver"]:
        """The session session_id, or the next one with available messages (None when
        none came within max_wait)."""
        wait = _interval(max_wait)
        args = [queue, session_id, wait]
        types = {1: "text", 2: "interval"}
        if wait is None or wait == datetime.timedelta(0):
            rows = self._call("sbq_accept_session", args, types=types)
        else:
            rows = self._waiting_call("sbq_accept_session", args, None, None, types)
        if not rows:
            return None
        session_id, token, locked_until = rows[0]
        return SessionReceiver(self, queue, session_id, token, locked_until)

    # -- topics, subscriptions, rules (sbqueue 0.10)

    def create_topic(self, name: str, **options) -> dict:
        """sbq_create_topic(name, option => value, ...): default_message_ttl,
        duplicate_detection_window (seconds or timedelta), max_message_size. The topic's
        properties (sbq_topic_properties, as get_topic)."""
        return self._record("sbq_create_topic", [name], _entity_options(options))

    def update_topic(self, name: str, **options) -> dict:
        """sbq_update_topic: changes the options given (create_topic's), keeps the
        others; the topic's properties."""
        return self._record("sbq_update_topic", [name], _entity_options(options))

    def delete_topic(self, name: str) -> None:
        """Deletes the topic with its subscriptions, their messages, rules and rights."""
        self._call("sbq_delete_topic", [name])

    def get_topic(self, name: str) -> dict:
        """The topic's properties: topic, default_message_ttl, duplicate_detection_window,
        max_message_size, created_at, updated_at (EntityNotFound when there is none)."""
        return self._record("sbq_get_topic", [name])

    def topics(self) -> List[dict]:
        """The topics the caller holds a right on (sbq_topics), as get_topic's dicts."""
        return self._rows(sql.SQL("SELECT * FROM {} ORDER BY topic").format(self._fn("sbq_topics")),
                          [])

    def topic_stats(self, topic: str) -> Optional[dict]:
        """sbq_topic_stats of a topic: subscription_count, sent (duplicates not counted)
        and dropped (taken by no subscription). EntityNotFound when there is no such
        topic. (A subscription's counts: queue_stats(subscription_address(t, s)).)"""
        rows = self._rows(
            sql.SQL("SELECT s.* FROM {}(%s::text) t LEFT JOIN {} s ON s.topic = t.topic").format(
                self._fn("sbq_get_topic"), self._fn("sbq_topic_stats")), [topic])
        return rows[0] if rows and rows[0]["topic"] is not None else None

    def create_subscription(self, topic: str, name: str, **options) -> dict:
        """sbq_create_subscription(topic, name, option => value, ...): create_queue's
        options but max_message_size and duplicate_detection_window (the topic's apply),
        and dead_lettering_on_filter_evaluation_exceptions. It starts with the rule
        $Default (every message). The subscription's properties."""
        return self._record("sbq_create_subscription", [topic, name], _entity_options(options))

    def update_subscription(self, topic: str, name: str, **options) -> dict:
        """sbq_update_subscription: changes the options given, keeps the others
        (requires_session is set at creation only); the subscription's properties."""
        return self._record("sbq_update_subscription", [topic, name], _entity_options(options))

    def delete_subscription(self, topic: str, name: str) -> None:
        """Deletes the subscription with its messages, rules and rights."""
        self._call("sbq_delete_subscription", [topic, name])

    def get_subscription(self, topic: str, name: str) -> dict:
        """The subscription's properties (sbq_subscription_properties) as a dict
        (EntityNotFound when there is none)."""
        return self._record("sbq_get_subscription", [topic, name])

    def subscriptions(self, topic: str) -> List[dict]:
        """The topic's subscriptions the caller may see (sbq_subscriptions), in the order
        they were made, as get_subscription's dicts."""
        rows = self._rows(
            sql.SQL("SELECT s.* FROM {}(%s::text) t LEFT JOIN {} s ON s.topic = t.topic"
                    " ORDER BY s.created_at, s.subscription").format(
                self._fn("sbq_get_topic"), self._fn("sbq_subscriptions")), [topic])
        return [r for r in rows if r["subscription"] is not None]

    def add_rule(self, topic: str, subscription: str, rule: str, sql_filter: Optional[str] = None,
                 correlation_filter: Optional[dict] = None, action: Optional[str] = None) -> None:
        """Adds a rule: a SQL filter or a correlation filter (a dict of system properties
        and "properties", all to be equal), or neither (the true filter), and an action
        or none. A filter or action that does not parse is InvalidArgument, the position
        in its detail."""
        self._call("sbq_add_rule", [topic, subscription, rule, sql_filter,
                                    Jsonb(correlation_filter) if correlation_filter is not None
                                    else None, action],
                   types={3: "text", 4: "jsonb", 5: "text"})

    def remove_rule(self, topic: str, subscription: str, rule: str) -> None:
        self._call("sbq_remove_rule", [topic, subscription, rule])

    def rules(self, topic: str, subscription: str) -> List[dict]:
        """The subscription's rules (sbq_rules), in the order they were added: topic,
        subscription, rule, filter_type ("sql", "correlation" or "true"), filter (the
        SQL filter; a correlation filter as a dict; "1=1"), action, created_at."""
        rows = self._rows(
            sql.SQL("SELECT r.* FROM {}(%s::text, %s::text) s LEFT JOIN {} r"
                    " ON r.topic = s.topic AND r.subscription = s.subscription"
                    " ORDER BY r.created_at, r.rule").format(
                self._fn("sbq_get_subscription"), self._fn("sbq_rules")), [topic, subscription])
        return [_rule(r) for r in rows if r["rule"] is not None]

    def _new_message(self, body, options):
        """sbq_new_message(body, option => value, ...) as SQL, and its parameters."""
        value, kind = _body(body)
        opts, types = Sender._options(options)
        parts, params = [sql.SQL("%s::" + kind)], [value]
        for k, v in opts.items():
            parts.append(sql.SQL("{} => %s::" + types[k]).format(sql.Identifier(k)))
            params.append(v)
        return sql.SQL("{}({})").format(self._fn("sbq_new_message"), sql.SQL(", ").join(parts)), params

    def test_filter(self, sql_filter: str, body="", **options) -> Optional[bool]:
        """sbq_test_filter: a SQL filter's value on a message (body and send's options);
        None when it is unknown. A filter that does not parse, or that fails to
        evaluate on the message (a subscription would dead-letter it), raises
        InvalidArgument. Reads and writes no table."""
        call, params = self._new_message(body, options)
        query = sql.SQL("SELECT {}(%s::text, {})").format(self._fn("sbq_test_filter"), call)
        with typed_errors():
            return self._execute(query, [sql_filter, *params]).fetchone()[0]

    def test_action(self, action: str, body="", **options) -> OutgoingMessage:
        """sbq_test_action: the message (body and send's options) after a rule's action,
        as an OutgoingMessage (its body as bytes). Errors as test_filter's."""
        call, params = self._new_message(body, options)
        query = sql.SQL("SELECT * FROM {}(%s::text, {})").format(self._fn("sbq_test_action"), call)
        with typed_errors():
            values = list(self._execute(query, [action, *params]).fetchone())
        values[0] = bytes(values[0]) if values[0] is not None else b""
        return OutgoingMessage(*values)

    def topic_sender(self, topic: str) -> "Sender":
        """sender(topic): a topic is sent to as a queue is."""
        return Sender(self, topic)

    def subscription_receiver(self, topic: str, subscription: str,
                              receive_mode: str = "peek_lock") -> "Receiver":
        return Receiver(self, subscription_address(topic, subscription), receive_mode)

    def subscription_dead_letter_receiver(self, topic: str, subscription: str) -> "Receiver":
        return Receiver(self, subscription_address(topic, subscription) + "/$deadletterqueue")

    def accept_subscription_session(self, topic: str, subscription: str,
                                    session_id: Optional[str] = None,
                                    max_wait: Seconds = 0) -> Optional["SessionReceiver"]:
        """accept_session on a subscription (that requires sessions)."""
        return self.accept_session(subscription_address(topic, subscription), session_id, max_wait)


class Sender:
    """Sends to one queue or topic."""

    def __init__(self, client: Client, queue: str):
        self.client = client
        self.queue = queue

    @staticmethod
    def _options(options):
        unknown = set(options) - set(SEND_OPTIONS)
        if unknown:
            raise TypeError("unknown send options: %s" % ", ".join(sorted(unknown)))
        out = {}
        types = {}
        for k, v in options.items():
            if k == "time_to_live":
                v = _interval(v)
                types[k] = "interval"
            elif k == "application_properties":
                v = Jsonb(v) if v is not None else None
                types[k] = "jsonb"
            elif k == "scheduled_enqueue_time":
                types[k] = "timestamptz"
            else:
                types[k] = "text"
            out[k] = v
        return out, types

    def send(self, body, **options) -> int:
        """The sequence number of the message sent. Options: message_id, session_id,
        correlation_id, subject, content_type, reply_to, reply_to_session_id,
        to_address, time_to_live, scheduled_enqueue_time, application_properties."""
        value, t = _body(body)
        opts, types = self._options(options)
        types[1] = t
        return self.client._one("sbq_send", [self.queue, value], opts, types=types)

    def send_batch(self, bodies: Iterable, **options) -> List[int]:
        """Sends the bodies (all of one kind: str, bytes, or JSON values) with the same
        options, in one call; their sequence numbers, in order."""
        bodies = list(bodies)
        if not bodies:
            return []
        kinds = {_body(b)[1] for b in bodies}
        if len(kinds) != 1:
            raise TypeError("a batch's bodies must be all str, all bytes, or all JSON values")
        kind = kinds.pop()
        values = [_body(b)[0] for b in bodies]
        opts, types = self._options(options)
        types[1] = kind + "[]"
        rows = self.client._call("sbq_send_batch", [self.queue, values], opts, types=types)
        return [r[0] for r in rows]

    def send_messages(self, messages: Iterable[Union[OutgoingMessage, dict]]) -> List[int]:
        """Sends messages that each have properties of their own (OutgoingMessage, or a
        dict with "body" and sbq_send's options), in one call, all or nothing; their
        sequence numbers, in order."""
        msgs = [m if isinstance(m, OutgoingMessage) else OutgoingMessage(**m) for m in messages]
        if not msgs:
            return []
        kinds, texts, jsons, blobs = [], [], [], []
        for m in msgs:
            value, kind = _body(m.body)
            kinds.append(kind)
            texts.append(value if kind == "text" else None)
            jsons.append(value if kind == "jsonb" else None)
            blobs.append(value if kind == "bytea" else None)
        columns = [(o, [getattr(m, o) for m in msgs]) for o in SEND_OPTIONS]
        params = [self.queue, kinds, texts, jsons, blobs]
        arrays = [sql.SQL("%s::text[]"), sql.SQL("%s::text[]"), sql.SQL("%s::jsonb[]"),
                  sql.SQL("%s::bytea[]")]
        for name, values in columns:
            _, types = self._options({name: None})
            if name == "time_to_live":
                values = [_interval(v) for v in values]
            elif name == "application_properties":
                values = [Jsonb(v) if v is not None else None for v in values]
            params.append(values)
            arrays.append(sql.SQL("%s::" + types[name] + "[]"))
        names = ["k", "t", "j", "b"] + list(SEND_OPTIONS)
        props = sql.SQL(", ").join(sql.SQL("u.") + sql.Identifier(n) for n in SEND_OPTIONS)
        make = self.client._fn("sbq_new_message")
        query = sql.SQL(
            "SELECT s FROM {send}(%s::text, ARRAY("
            "SELECT CASE u.k WHEN 'text' THEN {make}(u.t, {props})"
            " WHEN 'jsonb' THEN {make}(u.j, {props}) ELSE {make}(u.b, {props}) END"
            " FROM unnest({arrays}) WITH ORDINALITY AS u({names}, ord) ORDER BY u.ord)) s"
        ).format(send=self.client._fn("sbq_send_batch"), make=make, props=props,
                 arrays=sql.SQL(", ").join(arrays),
                 names=sql.SQL(", ").join(sql.Identifier(n) for n in names))
        with typed_errors():
            rows = self.client._execute(query, params).fetchall()
        return [r[0] for r in rows]

    def schedule(self, body, when: datetime.datetime, **options) -> int:
        """Sends body to become available at when; its number for cancel_scheduled."""
        return self.send(body, scheduled_enqueue_time=when, **options)

    def cancel_scheduled(self, sequence_number: int) -> None:
        self.client._call("sbq_cancel_scheduled", [self.queue, sequence_number],
                          types={1: "bigint"})


class Receiver:
    """Receives from one queue or subscription ("<topic>/subscriptions/<name>"), or its
    "/$deadletterqueue", and settles."""

    def __init__(self, client: Client, queue: str, receive_mode: str = "peek_lock"):
        self.client = client
        self.queue = queue
        self.receive_mode = receive_mode

    def receive(self, max_messages: int = 1, max_wait: Seconds = 0) -> List[ReceivedMessage]:
        """Up to max_messages, waiting up to max_wait for the first (Client.cancel() ends
        the wait early, with nothing)."""
        return self.client._messages(
            "sbq_receive", [self.queue, max_messages, _interval(max_wait), self.receive_mode],
            types={1: "integer", 2: "interval", 3: "text"}, wait=_interval(max_wait) != datetime.timedelta(0))

    def peek(self, max_messages: int = 1, from_sequence_number: Optional[int] = None
             ) -> List[ReceivedMessage]:
        return self.client._messages("sbq_peek", [self.queue, max_messages, from_sequence_number],
                                     types={1: "integer", 2: "bigint"})

    def receive_deferred(self, sequence_numbers: Iterable[int]) -> List[ReceivedMessage]:
        return self.client._messages("sbq_receive_deferred",
                                     [self.queue, list(sequence_numbers)], types={1: "bigint[]"})

    def _settle(self, fn, messages, extra_args=(), extra_types=None, kwargs=None):
        """One settlement of one message or many (many: in one call, all or nothing)."""
        toks = _tokens(messages)
        types = dict(extra_types or {})
        if len(toks) == 1:
            types[1] = "uuid"
            return self.client._one(fn, [self.queue, toks[0], *extra_args], kwargs, types=types)
        types[1] = "uuid[]"
        return self.client._one(fn, [self.queue, toks, *extra_args], kwargs, types=types)

    def complete(self, messages) -> int:
        """Completes one message or many (all or nothing); how many."""
        toks = _tokens(messages)
        return self.client._one("sbq_complete", [self.queue, toks], types={1: "uuid[]"})

    def abandon(self, messages, properties_to_modify: Optional[dict] = None,
                delay: Optional[Seconds] = None) -> None:
        """Abandons one message or many (all or nothing); with a delay, they are not
        received again before it has passed."""
        kwargs, types = {}, {2: "jsonb"}
        if delay is not None:
            kwargs["delay"] = _interval(delay)
            types["delay"] = "interval"
        self._settle("sbq_abandon", messages,
                     [Jsonb(properties_to_modify) if properties_to_modify is not None else None],
                     types, kwargs)

    def defer(self, messages, properties_to_modify: Optional[dict] = None) -> None:
        """Defers one message or many (all or nothing)."""
        self._settle("sbq_defer", messages,
                     [Jsonb(properties_to_modify) if properties_to_modify is not None else None],
                     {2: "jsonb"})

    def dead_letter(self, messages, reason: Optional[str] = None,
                    error_description: Optional[str] = None,
                    properties_to_modify: Optional[dict] = None) -> None:
        """Dead-letters one message or many (all or nothing)."""
        self._settle("sbq_deadletter", messages,
                     [reason, error_description,
                      Jsonb(properties_to_modify) if properties_to_modify is not None else None],
                     {2: "text", 3: "text", 4: "jsonb"})

    def renew(self, messages) -> datetime.datetime:
        """Renews the lock of one message or many (all or nothing); the new locked_until
        (for many, the earliest)."""
        return self._settle("sbq_renew", messages)

    def settle(self, messages, disposition: str, reason: Optional[str] = None,
               error_description: Optional[str] = None,
               properties_to_modify: Optional[dict] = None,
               delay: Optional[Seconds] = None) -> List[Settled]:
        """Settles what it can of messages ("complete", "abandon", "defer", "deadletter"
        or "renew") and says for each, in order, what became of it: a Settled whose
        outcome is completed, abandoned, deferred, dead_lettered, expired, renewed or
        lock_lost. A lost lock raises nothing."""
        rows = self.client._call(
            "sbq_settle",
            [self.queue, _tokens(messages), disposition, reason, error_description,
             Jsonb(properties_to_modify) if properties_to_modify is not None else None,
             _interval(delay)],
            types={1: "uuid[]", 2: "text", 3: "text", 4: "text", 5: "jsonb", 6: "interval"})
        return [Settled(*r) for r in rows]


class SessionReceiver(Receiver):
    """A session held by this client: its messages in order, its state, its lock.
    As a context manager it releases the session at the end."""

    def __init__(self, client, queue, session_id, token, locked_until):
        super().__init__(client, queue)
        self.session_id = session_id
        self.token = token
        self.locked_until = locked_until

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        try:
            self.release()
        except Exception:  # noqa: BLE001 - the lock may be lost already; the error is theirs
            if exc[0] is None:
                raise

    def receive(self, max_messages: int = 1, max_wait: Seconds = 0) -> List[ReceivedMessage]:
        return self.client._messages(
            "sbq_receive_session", [self.queue, self.token, max_messages, _interval(max_wait)],
            types={1: "uuid", 2: "integer", 3: "interval"},
            wait=_interval(max_wait) != datetime.timedelta(0))

    def receive_deferred(self, sequence_numbers: Iterable[int]) -> List[ReceivedMessage]:
        return self.client._messages("sbq_receive_deferred",
                                     [self.queue, list(sequence_numbers), self.token],
                                     types={1: "bigint[]", 2: "uuid"})

    def peek(self, max_messages: int = 1, from_sequence_number: Optional[int] = None
             ) -> List[ReceivedMessage]:
        """The session's messages (sbq_peek of the queue, page by page, kept to this
        session)."""
        out = []
        start = from_sequence_number
        while len(out) < max_messages:
            page = super().peek(5000, start)
            out.extend(m for m in page if m.session_id == self.session_id)
            if len(page) < 5000:
                break
            start = page[-1].sequence_number + 1
        return out[:max_messages]

    def renew_session(self) -> datetime.datetime:
        self.locked_until = self.client._one("sbq_renew_session", [self.queue, self.token],
                                             types={1: "uuid"})
        return self.locked_until

    def get_state(self) -> Optional[bytes]:
        state = self.client._one("sbq_get_session_state", [self.queue, self.token],
                                 types={1: "uuid"})
        return bytes(state) if state is not None else None

    def set_state(self, state: Optional[bytes]) -> None:
        self.client._call("sbq_set_session_state", [self.queue, self.token,
                                                    bytes(state) if state is not None else None],
                          types={1: "uuid", 2: "bytea"})

    def release(self) -> None:
        self.client._call("sbq_release_session", [self.queue, self.token], types={1: "uuid"})
