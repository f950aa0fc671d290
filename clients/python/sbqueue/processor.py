"""A processor: a handler per message, on several connections, with lock renewal.

    def handle(msg):
        order = msg.body_json()
        ...                       # return: complete; raise: abandon
        return None

    sbqueue.Processor("dbname=app", "orders", handle, concurrency=4).run()

A subscription is processed by its address:
Processor(conninfo, sbqueue.subscription_address("orders", "billing"), handle).

Each of `concurrency` threads has a connection of its own and receives one message
at a time (waiting up to max_wait, woken by a commit). The handler's return value
settles the message: None, True or "complete" completes it, "abandon" and "defer" do
those, "deadletter" dead-letters it; raising DeadLetter(reason, description)
dead-letters it with those; any other exception abandons it (and goes to on_error).
While a handler runs, a renewer thread (on a connection of its own) renews the
message's lock whenever half of it has passed, so a handler may take longer than
the queue's lock_duration.

run() blocks until stop(): SIGTERM and SIGINT call stop() when run() is called
from the main thread. stop() ends the receives that wait at once (a cancel), lets
the handlers in flight finish and settle their messages, and then returns; a
handler that outlives stop's timeout keeps its thread, and its message's lock
simply expires after the renewals stop.
"""

import datetime
import logging
import signal
import threading
from typing import Callable, Optional

from .client import Client
from .errors import MessageLockLost
from .message import ReceivedMessage

log = logging.getLogger("sbqueue.processor")


class DeadLetter(Exception):
    """Raised by a handler: dead-letter the message with this reason and description."""

    def __init__(self, reason: Optional[str] = None, description: Optional[str] = None):
        super().__init__(reason)
        self.reason = reason
        self.description = description


class _Renewer(threading.Thread):
    """Renews the locks of the messages in the handlers, on a connection of its own."""

    def __init__(self, connect, queue, tick=0.1):
        super().__init__(name="sbqueue-renewer", daemon=True)
        self._connect = connect
        self._queue = queue
        self._tick = tick
        self._held = {}           # token -> [locked_until, span]
        self._lock = threading.Lock()
        self._halt = threading.Event()
        self.renewals = 0
        self.lost = 0

    def track(self, msg: ReceivedMessage):
        now = datetime.datetime.now(datetime.timezone.utc)
        with self._lock:
            self._held[msg.lock_token] = [msg.locked_until, msg.locked_until - now]

    def untrack(self, msg: ReceivedMessage):
        with self._lock:
            self._held.pop(msg.lock_token, None)

    def stop(self):
        self._halt.set()

    def run(self):
        client = None
        try:
            while not self._halt.wait(self._tick):
                if client is None or client.conn.closed or client.conn.broken:
                    client = _reconnect(self._connect, client, self._halt)
                    if client is None:
                        continue
                now = datetime.datetime.now(datetime.timezone.utc)
                with self._lock:
                    due = [t for t, (until, span) in self._held.items() if until - now < span / 2]
                receiver = client.receiver(self._queue)
                for token in due:
                    try:
                        until = receiver.renew(token)
                    except MessageLockLost:
                        self.lost += 1
                        with self._lock:
                            self._held.pop(token, None)
                        continue
                    except Exception as err:  # noqa: BLE001 - logged; the next tick tries again
                        log.warning("renewing a lock of %s: %s", self._queue, err)
                        break
                    self.renewals += 1
                    with self._lock:
                        if token in self._held:
                            self._held[token][0] = until
        finally:
            if client is not None:
                client.close()


def _reconnect(connect, old, stopping):
    """A new client in place of old (closed); None when it failed (logged, after a pause)."""
    if old is not None:
        try:
            old.close()
        except Exception:  # noqa: BLE001 - it is broken already
            pass
    try:
        return connect()
    except Exception as err:  # noqa: BLE001 - logged; tried again
        log.error("connecting: %s", err)
        stopping.wait(1.0)
        return None


class Processor:
    """Runs handler(message) for each message of queue (a queue's name or a
    subscription's address, "<topic>/subscriptions/<name>"), concurrency at a time."""

    def __init__(self, conninfo: str, queue: str, handler: Callable[[ReceivedMessage], object],
                 concurrency: int = 1, max_wait: float = 5.0, renew_locks: bool = True,
                 schema: Optional[str] = None,
                 on_error: Optional[Callable[[ReceivedMessage, BaseException], None]] = None,
                 **connect_kwargs):
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        self.queue = queue
        self.handler = handler
        self.concurrency = concurrency
        self.max_wait = max_wait
        self.on_error = on_error
        self._conninfo = conninfo
        self._schema = schema
        self._connect_kwargs = connect_kwargs
        self._stopping = threading.Event()
        self._threads = []
        self._clients = []
        self._clients_lock = threading.Lock()
        self._renewer = _Renewer(self._connect, queue) if renew_locks else None
        self.settled = {"complete": 0, "abandon": 0, "defer": 0, "deadletter": 0, "lost": 0,
                        "failed": 0}
        self._count_lock = threading.Lock()

    def _connect(self) -> Client:
        return Client.connect(self._conninfo, schema=self._schema, **self._connect_kwargs)

    # -- lifecycle

    def start(self) -> "Processor":
        """Starts the threads and returns. When a connection fails, it stops the threads
        it started (their handlers in flight finish and settle), closes their
        connections and raises; the Processor is then done (make a new one to try
        again). A stop() while it connects ends it the same way, without an error."""
        try:
            if self._renewer is not None:
                self._renewer.start()
            for i in range(self.concurrency):
                if self._stopping.is_set():
                    break
                client = self._connect()
                with self._clients_lock:
                    self._clients.append(client)
                t = threading.Thread(target=self._work, args=(client,),
                                     name="sbqueue-handler-%d" % i, daemon=True)
                self._threads.append(t)
                t.start()
        except BaseException:
            self.stop(wait=True)
            raise
        return self

    def stop(self, wait: bool = False, timeout: Optional[float] = None) -> None:
        """Asks the threads to stop: waiting receives end at once, handlers in flight
        finish and settle. With wait, returns when they have (or timeout passed)."""
        self._stopping.set()
        with self._clients_lock:
            clients = list(self._clients)
        for client in clients:
            client.cancel(pending=True)
        if wait:
            self.join(timeout)

    def join(self, timeout: Optional[float] = None) -> bool:
        """Waits for the handler threads; True when all ended."""
        deadline = None if timeout is None else (
            datetime.datetime.now() + datetime.timedelta(seconds=timeout))
        for t in self._threads:
            if t is threading.current_thread():
                continue        # stop(wait=True) from a handler: it ends after it returns
            left = None if deadline is None else max(
                0.0, (deadline - datetime.datetime.now()).total_seconds())
            t.join(left)
        done = not any(t.is_alive() for t in self._threads if t is not threading.current_thread())
        if done and self._renewer is not None and self._renewer.ident is not None:
            self._renewer.stop()
            self._renewer.join(5)
        return done

    def run(self, install_signal_handlers: bool = True, stop_timeout: Optional[float] = None) -> None:
        """start(), then blocks until stop() (SIGTERM or SIGINT, from the main thread) has
        let the handlers in flight finish, or stop_timeout seconds have passed since."""
        previous = {}
        if install_signal_handlers and threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                previous[sig] = signal.signal(sig, lambda *_: self.stop())
        try:
            self.start()
            while not self._stopping.wait(0.2):
                pass
            self.join(stop_timeout)
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    @property
    def renewals(self) -> int:
        return self._renewer.renewals if self._renewer is not None else 0

    # -- one thread

    def _count(self, what):
        with self._count_lock:
            self.settled[what] += 1

    def _work(self, client: Client):
        try:
            while not self._stopping.is_set():
                if client.conn.closed or client.conn.broken:
                    new = _reconnect(self._connect, client, self._stopping)
                    if new is None:
                        continue
                    with self._clients_lock:
                        self._clients[self._clients.index(client)] = new
                    client = new
                    if self._stopping.is_set():
                        break
                try:
                    msgs = client.receiver(self.queue).receive(1, self.max_wait)
                except Exception as err:  # noqa: BLE001 - logged; tried again
                    log.error("receiving from %s: %s", self.queue, err)
                    self._stopping.wait(1.0)
                    continue
                for msg in msgs:
                    self._handle(client.receiver(self.queue), msg)
        finally:
            with self._clients_lock:
                self._clients.remove(client)
            client.close()

    def _handle(self, receiver, msg: ReceivedMessage):
        if self._renewer is not None:
            self._renewer.track(msg)
        outcome, error = "complete", None
        try:
            result = self.handler(msg)
            if result in (None, True, "complete"):
                outcome = "complete"
            elif result in ("abandon", "defer", "deadletter"):
                outcome = result
            else:
                raise ValueError("a handler returned %r (None, True, 'complete', 'abandon', "
                                 "'defer' or 'deadletter' expected)" % (result,))
        except DeadLetter as dl:
            outcome, error = "deadletter", dl
        except Exception as err:  # noqa: BLE001 - a handler's failure abandons its message
            outcome, error = "abandon", err
        finally:
            if self._renewer is not None:
                self._renewer.untrack(msg)
        try:
            if outcome == "complete":
                receiver.complete(msg)
            elif outcome == "abandon":
                receiver.abandon(msg)
            elif outcome == "defer":
                receiver.defer(msg)
            else:
                receiver.dead_letter(msg, getattr(error, "reason", None),
                                     getattr(error, "description", None))
            self._count(outcome)
        except MessageLockLost:
            self._count("lost")
            log.warning("message %d of %s: its lock was lost before it was settled (%s)",
                        msg.sequence_number, self.queue, outcome)
        except Exception as err:  # noqa: BLE001 - the message's lock expires; it comes again
            self._count("failed")
            log.error("message %d of %s: %s failed: %s", msg.sequence_number, self.queue,
                      outcome, err)
            if error is None:
                error = err
        if error is not None and not isinstance(error, DeadLetter) and self.on_error is not None:
            try:
                self.on_error(msg, error)
            except Exception as err:  # noqa: BLE001 - on_error's own failure is logged
                log.error("on_error raised: %s", err)
