"""sbqueue: a client for the sbqueue PostgreSQL extension (psycopg 3).

Client (a connection) gives Sender, Receiver and SessionReceiver, and manages queues,
topics, subscriptions and rules; Processor runs a handler per message of a queue or
subscription on several connections, renewing their locks; errors are the typed
exceptions of sbqueue.errors.
"""

from .client import Client, Receiver, Sender, SessionReceiver, subscription_address
from .errors import (EntityNotFound, InvalidArgument, InvalidOperation, MessageLockLost,
                     MessageNotFound, MessageTooLarge, NotSupported, NullArgument, OutOfLocks,
                     PermissionDenied, QueueAlreadyExists, QueueNotFound, QuotaExceeded,
                     ReadOnly, SbqError, SessionCannotBeLocked, SessionLockLost)
from .message import MESSAGE_FIELDS, OutgoingMessage, ReceivedMessage, Settled
from .processor import DeadLetter, Processor

__version__ = "0.11.0"

__all__ = [
    "Client", "Sender", "Receiver", "SessionReceiver", "Processor", "DeadLetter",
    "ReceivedMessage", "OutgoingMessage", "Settled", "MESSAGE_FIELDS", "SbqError", "QueueNotFound", "MessageLockLost",
    "MessageNotFound", "SessionLockLost", "SessionCannotBeLocked", "QueueAlreadyExists",
    "MessageTooLarge", "EntityNotFound", "InvalidOperation", "InvalidArgument",
    "NullArgument", "PermissionDenied", "OutOfLocks", "ReadOnly", "QuotaExceeded",
    "NotSupported", "subscription_address",
]
