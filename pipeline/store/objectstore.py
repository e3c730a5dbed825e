"""Object store for datasets: a local folder (embedded default) or S3, with atomic writes.

Keys are laid out as `datasets/{model_id}/{version}/{filename}`. A reader never sees a
half-written object under a final key: locally a temp file is renamed into place, on S3 an
object becomes visible only when its single PUT or its multipart upload completes.
"""

from __future__ import annotations

import errno
import hashlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Protocol

from botocore.exceptions import ClientError

from pipeline.core.config import Settings
from pipeline.core.tempfiles import locked_temp_file

CHUNK = 8 * 1024 * 1024
# A local object is written to `.tmp-*.part` beside its final path, then renamed into place.
TEMP_PREFIX = ".tmp-"
TEMP_SUFFIX = ".part"


def dataset_key(model_id: int, version: str, filename: str) -> str:
    return f"datasets/{model_id}/{version}/{filename}"


def public_uri(uri: str, key: str) -> str:
    """A stored object's URI as API answers show it: an `s3://` URI as it is; otherwise (the
    local store's `file://` URI, which names the server's folders) the object key."""
    return uri if uri.startswith("s3://") else key


@dataclass(frozen=True)
class StoredObject:
    key: str
    uri: str
    size_bytes: int
    sha256: str


class ObjectStore(Protocol):
    def put_file(
        self, key: str, path: Path, *, sha256: str | None = None, move: bool = False
    ) -> StoredObject: ...

    def put_bytes(self, key: str, data: bytes) -> StoredObject: ...

    def open(self, key: str) -> IO[bytes]: ...

    def local_path(self, key: str) -> AbstractContextManager[Path]: ...

    def exists(self, key: str) -> bool: ...

    def delete(self, key: str) -> None: ...

    def uri(self, key: str) -> str: ...

    def size(self, key: str) -> int | None: ...


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while chunk := fh.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


class LocalObjectStore:
    """Objects are files under one root folder; URIs are `file://` URIs of the same shape."""

    def __init__(self, root: Path) -> None:
        self.root = root.resolve()
        self.root.mkdir(parents=True, exist_ok=True)

    def _path(self, key: str) -> Path:
        path = (self.root / key).resolve()
        if self.root not in path.parents:
            raise ValueError(f"object key escapes the store: {key!r}")
        return path

    def uri(self, key: str) -> str:
        return self._path(key).as_uri()

    def _install(self, key: str, write: Any) -> StoredObject:
        final = self._path(key)
        final.parent.mkdir(parents=True, exist_ok=True)
        # `lock` stays open until the rename: a restart's sweep skips a temp file in use.
        tmp, lock = locked_temp_file(final.parent, TEMP_PREFIX, TEMP_SUFFIX)
        try:
            with os.fdopen(os.dup(lock), "wb") as out:
                write(out)
                out.flush()
                os.fsync(out.fileno())
            size = tmp.stat().st_size
            digest = sha256_file(tmp)
            os.replace(tmp, final)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        finally:
            os.close(lock)
        return StoredObject(key=key, uri=final.as_uri(), size_bytes=size, sha256=digest)

    def put_file(
        self, key: str, path: Path, *, sha256: str | None = None, move: bool = False
    ) -> StoredObject:
        """Copy `path` in; with `move` and a known `sha256`, rename it in when on the same disk.

        Renaming a 500 MB upload instead of copying and re-hashing it saves seconds; the caller
        vouches for `sha256` (it hashed the bytes as they arrived).
        """
        if move and sha256 is not None:
            final = self._path(key)
            final.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
            size = path.stat().st_size
            try:
                os.replace(path, final)
            except OSError as exc:
                if exc.errno != errno.EXDEV:
                    raise
            else:
                return StoredObject(key=key, uri=final.as_uri(), size_bytes=size, sha256=sha256)

        def write(out: IO[bytes]) -> None:
            with path.open("rb") as src:
                shutil.copyfileobj(src, out, CHUNK)

        return self._install(key, write)

    def put_bytes(self, key: str, data: bytes) -> StoredObject:
        return self._install(key, lambda out: out.write(data))

    def open(self, key: str) -> IO[bytes]:
        return self._path(key).open("rb")

    @contextmanager
    def local_path(self, key: str) -> Iterator[Path]:
        yield self._path(key)

    def exists(self, key: str) -> bool:
        return self._path(key).is_file()

    def size(self, key: str) -> int | None:
        path = self._path(key)
        return path.stat().st_size if path.is_file() else None

    def delete(self, key: str) -> None:
        path = self._path(key)
        path.unlink(missing_ok=True)
        # Drop now-empty version folders so a failed write leaves nothing behind.
        for parent in path.parents:
            if parent == self.root or not parent.is_dir() or any(parent.iterdir()):
                break
            parent.rmdir()


class S3ObjectStore:
    """Objects in one S3 bucket; boto3's managed transfer uses multipart for large files."""

    def __init__(self, bucket: str, client: Any) -> None:
        self.bucket = bucket
        self.client = client

    def uri(self, key: str) -> str:
        return f"s3://{self.bucket}/{key}"

    def put_file(
        self, key: str, path: Path, *, sha256: str | None = None, move: bool = False
    ) -> StoredObject:
        digest = sha256 or sha256_file(path)
        # upload_file completes a multipart upload only when every part is in; an aborted
        # transfer leaves no object under the key.
        self.client.upload_file(
            str(path), self.bucket, key, ExtraArgs={"Metadata": {"sha256": digest}}
        )
        return StoredObject(key, self.uri(key), path.stat().st_size, digest)

    def put_bytes(self, key: str, data: bytes) -> StoredObject:
        digest = hashlib.sha256(data).hexdigest()
        self.client.put_object(Bucket=self.bucket, Key=key, Body=data, Metadata={"sha256": digest})
        return StoredObject(key, self.uri(key), len(data), digest)

    def open(self, key: str) -> IO[bytes]:
        response = self.client.get_object(Bucket=self.bucket, Key=key)
        body: IO[bytes] = response["Body"]
        return body

    @contextmanager
    def local_path(self, key: str) -> Iterator[Path]:
        with tempfile.TemporaryDirectory(prefix="mk-s3-") as tmp:
            path = Path(tmp) / Path(key).name
            self.client.download_file(self.bucket, key, str(path))
            yield path

    def head(self, key: str) -> dict[str, Any] | None:
        try:
            head: dict[str, Any] = self.client.head_object(Bucket=self.bucket, Key=key)
            return head
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in {"404", "NoSuchKey", "NotFound"}:
                return None
            raise

    def exists(self, key: str) -> bool:
        return self.head(key) is not None

    def size(self, key: str) -> int | None:
        head = self.head(key)
        return int(head["ContentLength"]) if head else None

    def delete(self, key: str) -> None:
        self.client.delete_object(Bucket=self.bucket, Key=key)


def s3_client(settings: Settings, service: str = "s3") -> Any:
    # boto3 costs ~0.1-0.5 s to import; every API and CLI start imports this module, and with a
    # local store (the default) none of them needs an S3 or SQS client.
    import boto3

    return boto3.client(
        service, endpoint_url=settings.s3_endpoint_url, region_name=settings.aws_region
    )


def object_store_from_settings(settings: Settings) -> LocalObjectStore | S3ObjectStore:
    if settings.service_dataset_bucket:
        return S3ObjectStore(settings.service_dataset_bucket, s3_client(settings))
    return LocalObjectStore(settings.objects_dir)
