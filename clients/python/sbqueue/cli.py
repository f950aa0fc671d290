"""sbq: sbqueue from the shell, for operators.

    sbq [-d CONNINFO] [--json] stats [QUEUE]
    sbq peek QUEUE [-n N] [--from SEQ]
    sbq send QUEUE BODY [--session-id ID] [--subject S] [--message-id ID] [--json-body]
    sbq receive QUEUE [-n N] [--wait SECONDS] [--peek-lock]
    sbq resubmit QUEUE [SEQ ...]
    sbq purge QUEUE

The connection is libpq's (-d, or the PG* variables). BODY "-" reads standard
input. receive removes what it prints (receive-and-delete) unless --peek-lock,
which prints the lock tokens and leaves the locks to expire or be settled. With
--json every command prints JSON (a message's body as text when it is UTF-8,
else as base64 in "body_base64"). Errors print their SQLSTATE and exit 1.
"""

import argparse
import base64
import datetime
import json
import sys
import uuid

from psycopg.types.json import Jsonb

from .client import Client
from .errors import SbqError
from .message import MESSAGE_FIELDS


def _jsonable(value):
    if isinstance(value, (datetime.datetime, datetime.date)):
        return value.isoformat()
    if isinstance(value, datetime.timedelta):
        return value.total_seconds()
    if isinstance(value, uuid.UUID):
        return str(value)
    return value


def _message(m):
    out = {}
    for f in MESSAGE_FIELDS:
        v = getattr(m, f)
        if f == "body":
            try:
                out["body"] = v.decode("utf-8")
            except UnicodeDecodeError:
                out["body_base64"] = base64.b64encode(v).decode()
            continue
        out[f] = _jsonable(v)
    return out


def _print_messages(msgs, as_json):
    if as_json:
        print(json.dumps([_message(m) for m in msgs]))
        return
    for m in msgs:
        try:
            body = m.body.decode("utf-8")
        except UnicodeDecodeError:
            body = "<%d bytes>" % len(m.body)
        extra = " token=%s" % m.lock_token if m.lock_token else ""
        print("%d\t%s\tdelivery %d%s\t%s" % (m.sequence_number, m.state, m.delivery_count, extra,
                                             body))


def _parser():
    p = argparse.ArgumentParser(prog="sbq", description="sbqueue from the shell")
    p.add_argument("-d", "--dbname", default="", help="a libpq connection string (PG* apply)")
    p.add_argument("--schema", default=None, help="the schema of sbqueue's functions")
    p.add_argument("--json", action="store_true", help="print JSON")
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("stats", help="sbq_queue_stats, of one queue or all")
    s.add_argument("queue", nargs="?")
    s = sub.add_parser("peek", help="messages in any state, locking nothing")
    s.add_argument("queue")
    s.add_argument("-n", type=int, default=10)
    s.add_argument("--from", dest="from_seq", type=int, default=None)
    s = sub.add_parser("send", help="send one message")
    s.add_argument("queue")
    s.add_argument("body", help='the body ("-": standard input)')
    s.add_argument("--session-id")
    s.add_argument("--subject")
    s.add_argument("--message-id")
    s.add_argument("--json-body", action="store_true", help="the body is JSON (sent as jsonb)")
    s = sub.add_parser("receive", help="receive (and delete, unless --peek-lock)")
    s.add_argument("queue")
    s.add_argument("-n", type=int, default=1)
    s.add_argument("--wait", type=float, default=0)
    s.add_argument("--peek-lock", action="store_true")
    s = sub.add_parser("resubmit", help="dead letters back to the queue (all, or these)")
    s.add_argument("queue")
    s.add_argument("seqs", nargs="*", type=int)
    s = sub.add_parser("purge", help="delete every message of the queue")
    s.add_argument("queue")
    return p


def run(args):
    with Client.connect(args.dbname, schema=args.schema) as client:
        if args.command == "stats":
            if args.queue:
                rows = [client.queue_stats(args.queue)]
                if rows[0] is None:
                    raise SbqError("queue \"%s\" not found" % args.queue, "SB001")
            else:
                from psycopg import sql
                cur = client._execute(sql.SQL("SELECT * FROM {} ORDER BY queue").format(
                    client._fn("sbq_queue_stats")))
                rows = [dict(zip([c.name for c in cur.description], r)) for r in cur.fetchall()]
            if args.json:
                print(json.dumps([{k: _jsonable(v) for k, v in r.items()} for r in rows]))
            else:
                for r in rows:
                    print("\t".join("%s=%s" % (k, v) for k, v in r.items()))
        elif args.command == "peek":
            _print_messages(client.receiver(args.queue).peek(args.n, args.from_seq), args.json)
        elif args.command == "send":
            body = sys.stdin.read() if args.body == "-" else args.body
            if args.json_body:
                # as jsonb whatever the JSON is: a JSON string would be sent as text
                body = Jsonb(json.loads(body))
            options = {k: v for k, v in (("session_id", args.session_id), ("subject", args.subject),
                                         ("message_id", args.message_id)) if v is not None}
            seq = client.sender(args.queue).send(body, **options)
            print(json.dumps({"sequence_number": seq}) if args.json else seq)
        elif args.command == "receive":
            mode = "peek_lock" if args.peek_lock else "receive_and_delete"
            _print_messages(client.receiver(args.queue, mode).receive(args.n, args.wait), args.json)
        elif args.command == "resubmit":
            n = client._one("sbq_resubmit", [args.queue, args.seqs or None], types={1: "bigint[]"})
            print(json.dumps({"resubmitted": n}) if args.json else n)
        elif args.command == "purge":
            n = client._one("sbq_purge_queue", [args.queue])
            print(json.dumps({"purged": n}) if args.json else n)


def main(argv=None):
    args = _parser().parse_args(argv)
    try:
        run(args)
    except SbqError as err:
        print("sbq: %s (SQLSTATE %s)" % (err, err.sqlstate), file=sys.stderr)
        return 1
    except Exception as err:  # noqa: BLE001 - a driver or connection error, printed
        # the server's errors that are not sbqueue's have a SQLSTATE too (a connection
        # error has none)
        sqlstate = getattr(err, "sqlstate", None)
        print("sbq: %s%s" % (str(err).rstrip(), " (SQLSTATE %s)" % sqlstate if sqlstate else ""),
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
