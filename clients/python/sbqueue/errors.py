"""Typed exceptions for sbqueue's SQLSTATEs.

Every error sbqueue raises on the server has a SQLSTATE (API.md, *Errors*). The
client raises the matching class below; each keeps the server's message, its
SQLSTATE and the driver's exception as __cause__.
"""

import contextlib

import psycopg


class SbqError(Exception):
    """An error sbqueue reported (or the base of those it did)."""

    sqlstate = None

    def __init__(self, message, sqlstate=None, diag=None):
        super().__init__(message)
        if sqlstate is not None:
            self.sqlstate = sqlstate
        self.detail = getattr(diag, "message_detail", None)
        self.hint = getattr(diag, "message_hint", None)


class QueueNotFound(SbqError):
    """SB001: the queue (messaging entity) does not exist."""
    sqlstate = "SB001"


class MessageLockLost(SbqError):
    """SB002: the lock token expired, is unknown, or its message was settled."""
    sqlstate = "SB002"


class MessageNotFound(SbqError):
    """SB003: no deferred (or scheduled) message has that sequence number."""
    sqlstate = "SB003"


class SessionLockLost(SbqError):
    """SB004: the session lock expired or was released."""
    sqlstate = "SB004"


class SessionCannotBeLocked(SbqError):
    """SB005: another receiver holds the session."""
    sqlstate = "SB005"


class QueueAlreadyExists(SbqError):
    """SB006: a queue of that name exists."""
    sqlstate = "SB006"


class MessageTooLarge(SbqError):
    """SB007: the body (or the session state) is larger than the queue takes."""
    sqlstate = "SB007"


class EntityNotFound(SbqError):
    """SB008: the topic, subscription or rule does not exist."""
    sqlstate = "SB008"


class InvalidOperation(SbqError):
    """SB010: the operation is not valid here (say, dead-lettering a dead letter,
    receiving from a topic, or sending to a subscription)."""
    sqlstate = "SB010"


class QuotaExceeded(SbqError):
    """54000: a topic has as many subscriptions, SQL filters or correlation filters as
    it may."""
    sqlstate = "54000"


class NotSupported(SbqError):
    """0A000: a feature sbqueue does not have (yet), or not with the installed SQL
    (say, forward_dead_lettered_messages_to)."""
    sqlstate = "0A000"


class InvalidArgument(SbqError, ValueError):
    """22023: an argument's value is out of range or malformed (a rule's filter or
    action that does not parse: the character position is in detail)."""
    sqlstate = "22023"


class NullArgument(SbqError, ValueError):
    """22004: NULL where a value is required."""
    sqlstate = "22004"


class PermissionDenied(SbqError):
    """42501: the role lacks the right on that queue."""
    sqlstate = "42501"


class OutOfLocks(SbqError):
    """53200: the shared memory for locks is full (settle or release, or size it up)."""
    sqlstate = "53200"


class ReadOnly(SbqError):
    """25006: a call that writes, on a hot standby."""
    sqlstate = "25006"


BY_SQLSTATE = {cls.sqlstate: cls for cls in (
    QueueNotFound, MessageLockLost, MessageNotFound, SessionLockLost,
    SessionCannotBeLocked, QueueAlreadyExists, MessageTooLarge, EntityNotFound,
    InvalidOperation, InvalidArgument, NullArgument, PermissionDenied, OutOfLocks,
    ReadOnly, QuotaExceeded, NotSupported)}


def translate(err):
    """The typed exception for a driver error, or None when sbqueue has none for it."""
    cls = BY_SQLSTATE.get(getattr(err, "sqlstate", None))
    if cls is None:
        return None
    diag = getattr(err, "diag", None)
    text = getattr(diag, "message_primary", None) or str(err)
    return cls(text, cls.sqlstate, diag)


@contextlib.contextmanager
def typed_errors():
    """Raise sbqueue's exceptions in place of the driver's, where one matches."""
    try:
        yield
    except psycopg.Error as err:
        typed = translate(err)
        if typed is None:
            raise
        raise typed from err
