"""The message a receive or a peek returns: sbq_message, field by field."""

import dataclasses
import datetime
import json
import uuid
from typing import Any, Optional

# sbq_message's columns, in order (a test checks them against the server's type)
MESSAGE_FIELDS = (
    "sequence_number", "message_id", "lock_token", "locked_until", "delivery_count",
    "enqueued_time", "scheduled_enqueue_time", "expires_at", "time_to_live", "state",
    "session_id", "correlation_id", "subject", "content_type", "reply_to",
    "reply_to_session_id", "to_address", "application_properties", "body",
    "dead_letter_reason", "dead_letter_error_description", "dead_letter_source",
)


@dataclasses.dataclass(frozen=True)
class ReceivedMessage:
    """One row of sbq_message. body is bytes: body_text() and body_json() decode it."""

    sequence_number: int
    message_id: str
    lock_token: Optional[uuid.UUID]
    locked_until: Optional[datetime.datetime]
    delivery_count: int
    enqueued_time: datetime.datetime
    scheduled_enqueue_time: Optional[datetime.datetime]
    expires_at: Optional[datetime.datetime]
    time_to_live: Optional[datetime.timedelta]
    state: str
    session_id: Optional[str]
    correlation_id: Optional[str]
    subject: Optional[str]
    content_type: Optional[str]
    reply_to: Optional[str]
    reply_to_session_id: Optional[str]
    to_address: Optional[str]
    application_properties: Optional[dict]
    body: bytes
    dead_letter_reason: Optional[str]
    dead_letter_error_description: Optional[str]
    dead_letter_source: Optional[str]

    @classmethod
    def from_row(cls, row):
        """From a row of sbq_message's columns in order (a tuple)."""
        values = list(row)
        values[18] = bytes(values[18]) if values[18] is not None else b""
        return cls(*values)

    def body_text(self, encoding="utf-8") -> str:
        return self.body.decode(encoding)

    def body_json(self) -> Any:
        return json.loads(self.body)


# the select list that yields a row in MESSAGE_FIELDS order
SELECT_LIST = ", ".join(MESSAGE_FIELDS)


@dataclasses.dataclass
class OutgoingMessage:
    """A message to send with properties of its own (Sender.send_messages). body is str
    (text), bytes (bytea) or a JSON value (jsonb), as for Sender.send; the other fields
    are sbq_send's options."""

    body: Any
    message_id: Optional[str] = None
    session_id: Optional[str] = None
    correlation_id: Optional[str] = None
    subject: Optional[str] = None
    content_type: Optional[str] = None
    reply_to: Optional[str] = None
    reply_to_session_id: Optional[str] = None
    to_address: Optional[str] = None
    time_to_live: Optional[datetime.timedelta] = None
    scheduled_enqueue_time: Optional[datetime.datetime] = None
    application_properties: Optional[dict] = None


class Settled(tuple):
    """What sbq_settle did with one token: (lock_token, outcome, locked_until)."""

    __slots__ = ()

    def __new__(cls, lock_token: uuid.UUID, outcome: str,
                locked_until: Optional[datetime.datetime]):
        return super().__new__(cls, (lock_token, outcome, locked_until))

    lock_token = property(lambda self: self[0])
    outcome = property(lambda self: self[1])
    locked_until = property(lambda self: self[2])

    @property
    def settled(self) -> bool:
        """Whether the token was valid (anything but lock_lost)."""
        return self[1] != "lock_lost"
