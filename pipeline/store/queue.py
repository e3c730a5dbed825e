"""Dataset-arrival queue: SQS in production, a database table in the embedded default.

Both carry S3 event-notification JSON, so one parser (`parse_arrival_message`) serves both:
on S3 the bucket notification writes the message, locally the writer of a dataset version
enqueues the same shape in the transaction that records the version (an outbox).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol
from urllib.parse import quote_plus, unquote_plus

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from pipeline.core.config import Settings
from pipeline.core.db import Database
from pipeline.core.tables import ArrivalEvent, isoformat_utc, utcnow
from pipeline.store.objectstore import StoredObject, s3_client


@dataclass(frozen=True)
class QueueMessage:
    handle: str
    body: str


@dataclass(frozen=True)
class ObjectArrival:
    """An object created in the store, as told by an S3 event notification."""

    bucket: str
    key: str
    size_bytes: int | None
    etag: str | None
    event_time: datetime | None


class ArrivalQueue(Protocol):
    source: str

    def receive(self, max_messages: int) -> list[QueueMessage]: ...

    def delete(self, message: QueueMessage) -> None: ...

    def defer(self, message: QueueMessage, seconds: int) -> None:
        """Hand the message back, to be received again after about `seconds`."""
        ...


def s3_event_body(bucket: str, stored: StoredObject) -> str:
    """An `ObjectCreated:Put` notification as S3 would send it (key URL-encoded)."""
    record = {
        "eventVersion": "2.1",
        "eventSource": "aws:s3",
        "eventTime": isoformat_utc(utcnow()),
        "eventName": "ObjectCreated:Put",
        "s3": {
            "bucket": {"name": bucket},
            "object": {
                "key": quote_plus(stored.key, safe="/"),
                "size": stored.size_bytes,
                "eTag": stored.sha256,
            },
        },
    }
    return json.dumps({"Records": [record]})


def parse_arrival_message(body: str) -> list[ObjectArrival]:
    """Object-created records in a message; [] for test events. ValueError when malformed."""
    try:
        payload = json.loads(body)
    except json.JSONDecodeError as exc:
        raise ValueError(f"message is not JSON: {exc.msg}") from None
    if not isinstance(payload, dict):
        raise ValueError("message is not a JSON object")
    if payload.get("Event") == "s3:TestEvent":
        return []
    records = payload.get("Records")
    if not isinstance(records, list):
        raise ValueError("message has no Records list")
    arrivals = []
    for record in records:
        try:
            if not str(record.get("eventName", "")).startswith("ObjectCreated"):
                continue
            s3: dict[str, Any] = record["s3"]
            obj = s3["object"]
            when = record.get("eventTime")
            arrivals.append(
                ObjectArrival(
                    bucket=str(s3["bucket"]["name"]),
                    key=unquote_plus(str(obj["key"])),
                    size_bytes=int(obj["size"]) if obj.get("size") is not None else None,
                    etag=obj.get("eTag"),
                    event_time=datetime.fromisoformat(when.replace("Z", "+00:00"))
                    if isinstance(when, str)
                    else None,
                )
            )
        except (KeyError, TypeError, AttributeError, ValueError) as exc:
            raise ValueError(f"malformed S3 record: {exc!r}") from None
    return arrivals


def enqueue_local_arrival(session: Session, stored: StoredObject) -> None:
    """Record the arrival event in the caller's transaction (embedded default only)."""
    session.add(ArrivalEvent(body=s3_event_body("local", stored)))


class LocalArrivalQueue:
    """Reads the `arrival_events` table; a message is gone once deleted."""

    source = "local"

    def __init__(self, db: Database) -> None:
        self.db = db

    def receive(self, max_messages: int) -> list[QueueMessage]:
        with self.db.session() as session:
            rows = session.scalars(
                select(ArrivalEvent).order_by(ArrivalEvent.id).limit(max_messages)
            ).all()
            return [QueueMessage(handle=str(row.id), body=row.body) for row in rows]

    def delete(self, message: QueueMessage) -> None:
        with self.db.session() as session:
            session.execute(delete(ArrivalEvent).where(ArrivalEvent.id == int(message.handle)))

    def defer(self, message: QueueMessage, seconds: int) -> None:
        # A row stays until deleted; the next receive sees it again.
        return None


class SqsArrivalQueue:
    """Long-polls one SQS queue with boto3."""

    source = "sqs"

    def __init__(self, queue_url: str, client: Any, wait_seconds: int = 1) -> None:
        self.queue_url = queue_url
        self.client = client
        self.wait_seconds = wait_seconds

    def receive(self, max_messages: int) -> list[QueueMessage]:
        response = self.client.receive_message(
            QueueUrl=self.queue_url,
            MaxNumberOfMessages=max(1, min(max_messages, 10)),
            WaitTimeSeconds=self.wait_seconds,
        )
        return [
            QueueMessage(handle=m["ReceiptHandle"], body=m["Body"])
            for m in response.get("Messages", [])
        ]

    def delete(self, message: QueueMessage) -> None:
        self.client.delete_message(QueueUrl=self.queue_url, ReceiptHandle=message.handle)

    def defer(self, message: QueueMessage, seconds: int) -> None:
        self.client.change_message_visibility(
            QueueUrl=self.queue_url,
            ReceiptHandle=message.handle,
            VisibilityTimeout=max(0, min(seconds, 43_200)),
        )


def arrival_queue_from_settings(
    settings: Settings, db: Database, *, sqs_wait_seconds: int = 1
) -> ArrivalQueue:
    """SQS when DATASET_ARRIVAL_SQS_QUEUE_URL is set, else the embedded queue table."""
    if settings.dataset_arrival_sqs_queue_url:
        return SqsArrivalQueue(
            settings.dataset_arrival_sqs_queue_url,
            s3_client(settings, "sqs"),
            wait_seconds=sqs_wait_seconds,
        )
    return LocalArrivalQueue(db)
