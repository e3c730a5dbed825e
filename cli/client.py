"""HTTP client of the marketplace API used by the contributor commands: auth, retries, errors.

One `MarketplaceClient` per command run. Three credentials, each used only where spec §5 asks
for it: the session token (contributions), a `platform` API key (benchmark upload) and the admin
token (key management). Transient failures (connection errors, 429, 500, 502, 503, 504) are
retried with exponential backoff where a retry cannot repeat an effect: reads, and
contributions sent with an `Idempotency-Key`. Other writes are retried only when the
connection could not be opened, so nothing was sent.
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, Literal

import httpx

DEFAULT_URL = "http://127.0.0.1:8000"
TRANSIENT_STATUS = frozenset({429, 500, 502, 503, 504})
FINAL_JOB_STATUSES = frozenset({"rewarded", "rejected", "failed"})

Auth = Literal["none", "session", "api_key", "admin"]
RetryMode = Literal["all", "connect"]

CREDENTIAL_HINTS: dict[str, str] = {
    "session": "a session token is needed: pass --token or set MARKETPLACE_TOKEN "
    "(an operator mints one with `marketplace token --user ID`)",
    "api_key": "a platform API key is needed: pass --api-key or set MARKETPLACE_API_KEY "
    "(`marketplace keys create --service-id platform --scope benchmarks:write` makes one)",
    "admin": "an admin token is needed: pass --admin-token or set MARKETPLACE_ADMIN_TOKEN "
    "(ADMIN_TOKEN of the server, or `marketplace token --user ID --admin`)",
}


class ClientError(Exception):
    """A command cannot go on; `str()` is the message for the user."""


class MissingCredential(ClientError):
    pass


class ApiError(ClientError):
    """The server answered with an error status; `body` is its JSON body when it had one."""

    def __init__(self, status: int, detail: str, body: Any = None) -> None:
        super().__init__(f"HTTP {status}: {detail}")
        self.status = status
        self.detail = detail
        self.body = body


class RowsRejected(ApiError):
    """A contribution answered 400 with the spec §2.4 body (`errors` lists row paths)."""

    @property
    def errors(self) -> list[dict[str, Any]]:
        errors = self.body.get("errors") if isinstance(self.body, dict) else None
        return list(errors or [])


class Unreachable(ClientError):
    """No answer from the server after every retry."""


@dataclass(frozen=True)
class RetryPolicy:
    """Up to `attempts` tries; waits base * 2^n (jittered, capped), or the server's Retry-After."""

    attempts: int = 5
    base_delay: float = 0.5
    max_delay: float = 8.0

    def delay(self, retry_number: int, retry_after: float | None = None) -> float:
        if retry_after is not None:
            return min(max(retry_after, 0.0), 60.0)
        backoff = min(self.max_delay, self.base_delay * 2**retry_number)
        return backoff * (0.75 + random.random() / 2)


@dataclass
class Credentials:
    token: str | None = None
    api_key: str | None = None
    admin_token: str | None = None

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **given: str | None) -> Credentials:
        env = os.environ if env is None else env
        return cls(
            token=given.get("token") or env.get("MARKETPLACE_TOKEN") or None,
            api_key=given.get("api_key") or env.get("MARKETPLACE_API_KEY") or None,
            admin_token=given.get("admin_token") or env.get("MARKETPLACE_ADMIN_TOKEN") or None,
        )

    def header(self, auth: Auth) -> dict[str, str]:
        value = {
            "none": None,
            "session": self.token,
            "api_key": self.api_key,
            "admin": self.admin_token,
        }[auth]
        if auth == "none":
            return {}
        if not value:
            raise MissingCredential(CREDENTIAL_HINTS[auth])
        return {"Authorization": f"Bearer {value}"}


def resolve_url(url: str | None, env: Mapping[str, str] | None = None) -> str:
    env = os.environ if env is None else env
    return (url or env.get("MARKETPLACE_URL") or DEFAULT_URL).rstrip("/")


def _retry_after(response: httpx.Response) -> float | None:
    value = response.headers.get("retry-after")
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


def _detail(response: httpx.Response) -> tuple[str, Any]:
    try:
        body = response.json()
    except ValueError:
        text = response.text.strip().splitlines()
        return (text[0][:200] if text else response.reason_phrase), None
    if isinstance(body, dict):
        message = body.get("detail") or body.get("message")
        if isinstance(message, str):
            return message, body
        if message is not None:
            return str(message)[:500], body
    return response.reason_phrase, body


class ProgressReader:
    """A binary file that reports how far it has been read; httpx streams it in chunks."""

    def __init__(self, raw: BinaryIO, on_progress: Callable[[int], None]) -> None:
        self._raw = raw
        self._on_progress = on_progress

    def read(self, size: int = -1) -> bytes:
        chunk = self._raw.read(size)
        self._on_progress(self._raw.tell())
        return chunk

    def seek(self, offset: int, whence: int = 0) -> int:
        position = self._raw.seek(offset, whence)
        self._on_progress(position)
        return position

    def tell(self) -> int:
        return self._raw.tell()

    def fileno(self) -> int:  # lets httpx send a Content-Length instead of chunks
        return self._raw.fileno()


@dataclass
class MarketplaceClient:
    url: str = DEFAULT_URL
    credentials: Credentials = field(default_factory=Credentials)
    timeout: float = 60.0
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    on_retry: Callable[[str, float], None] | None = None
    sleep: Callable[[float], None] = time.sleep
    transport: httpx.BaseTransport | None = None

    def __post_init__(self) -> None:
        self._http = httpx.Client(
            base_url=self.url,
            timeout=httpx.Timeout(self.timeout),
            transport=self.transport,
            headers={"User-Agent": "marketplace-cli"},
        )

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> MarketplaceClient:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    # --- plumbing ------------------------------------------------------------------------

    def request(
        self,
        method: str,
        path: str,
        *,
        auth: Auth = "none",
        retry: RetryMode = "all",
        expect: tuple[int, ...] = (200,),
        **kwargs: Any,
    ) -> httpx.Response:
        """Send one request, retrying what `retry` allows; an unexpected status raises ApiError."""
        headers = {**kwargs.pop("headers", {}), **self.credentials.header(auth)}
        attempt = 0
        while True:
            attempt += 1
            last = attempt >= self.retry.attempts
            try:
                response = self._http.request(method, path, headers=headers, **kwargs)
            except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
                if last:
                    raise Unreachable(f"cannot reach {self.url}: {exc}") from None
                self._wait(attempt, f"cannot connect ({exc})")
                continue
            except httpx.TransportError as exc:
                if retry != "all" or last:
                    raise Unreachable(f"{method} {path} failed: {exc!r}") from None
                self._wait(attempt, f"connection failed ({type(exc).__name__})")
                continue
            if response.status_code in expect:
                return response
            if response.status_code in TRANSIENT_STATUS and retry == "all" and not last:
                self._wait(
                    attempt, f"HTTP {response.status_code}", _retry_after(response), response
                )
                continue
            detail, body = _detail(response)
            if response.status_code == 400 and isinstance(body, dict) and "errors" in body:
                raise RowsRejected(400, detail, body)
            raise ApiError(response.status_code, detail, body)

    def _wait(
        self,
        attempt: int,
        reason: str,
        retry_after: float | None = None,
        response: httpx.Response | None = None,
    ) -> None:
        if response is not None:
            response.close()
        delay = self.retry.delay(attempt - 1, retry_after)
        if self.on_retry is not None:
            self.on_retry(reason, delay)
        self.sleep(delay)

    # --- contract and contributions (spec §4.1, §4.2) ------------------------------------

    def list_models(self) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = self.request("GET", "/api/models").json()
        return result

    def data_spec(self, model_id: int) -> dict[str, Any]:
        spec: dict[str, Any] = self.request("GET", f"/api/models/{model_id}/data-spec").json()
        return spec

    def example(self, model_id: int, fmt: str = "json") -> str:
        params = {"format": fmt} if fmt != "json" else None
        return self.request("GET", f"/api/models/{model_id}/data-spec/example", params=params).text

    def submit_rows(
        self,
        model_id: int,
        rows: list[dict[str, Any]],
        *,
        manifest: dict[str, Any] | None = None,
        idempotency_key: str | None = None,
    ) -> dict[str, Any]:
        body: dict[str, Any] = {"modelId": model_id, "benchmarkSpecId": None, "rows": rows}
        if manifest is not None:
            body["manifest"] = manifest
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else {}
        response = self.request(
            "POST",
            f"/api/models/{model_id}/contributions",
            auth="session",
            retry="all" if idempotency_key else "connect",
            expect=(200, 201, 202),
            json=body,
            headers=headers,
        )
        accepted: dict[str, Any] = response.json()
        return accepted

    def contribution(self, model_id: int, job_id: str) -> dict[str, Any]:
        job: dict[str, Any] = self.request(
            "GET", f"/api/models/{model_id}/contributions/{job_id}", auth="session"
        ).json()
        return job

    # --- benchmark upload (spec §4.3) ----------------------------------------------------

    def upload_benchmark(
        self,
        model_id: int,
        path: Path,
        fields: dict[str, str],
        on_progress: Callable[[int], None] | None = None,
    ) -> dict[str, Any]:
        """Stream `path` as multipart `file`; `on_progress` gets the bytes read so far."""
        with path.open("rb") as raw:
            stream = ProgressReader(raw, on_progress or (lambda _: None))
            response = self.request(
                "POST",
                f"/api/v1/benchmarks/upload/{model_id}",
                auth="api_key",
                retry="connect",
                expect=(201,),
                files={"file": (path.name, stream, "application/octet-stream")},
                data=fields,
                timeout=httpx.Timeout(self.timeout, read=max(self.timeout, 600.0)),
            )
        result: dict[str, Any] = response.json()
        return result

    # --- key management (spec §4.6) ------------------------------------------------------

    def create_key(self, body: dict[str, Any]) -> dict[str, Any]:
        response = self.request(
            "POST", "/api/v1/keys", auth="admin", retry="connect", expect=(200, 201), json=body
        )
        created: dict[str, Any] = response.json()
        return created

    def list_keys(
        self, service_id: str | None = None, active_only: bool = False
    ) -> list[dict[str, Any]]:
        params: dict[str, str] = {"active_only": "true" if active_only else "false"}
        if service_id:
            params["service_id"] = service_id
        keys: list[dict[str, Any]] = self.request(
            "GET", "/api/v1/keys", auth="admin", params=params
        ).json()
        return keys

    def get_key(self, key_id: str) -> dict[str, Any]:
        key: dict[str, Any] = self.request("GET", f"/api/v1/keys/{key_id}", auth="admin").json()
        return key

    def rotate_key(self, key_id: str) -> dict[str, Any]:
        rotated: dict[str, Any] = self.request(
            "POST",
            f"/api/v1/keys/{key_id}/rotate",
            auth="admin",
            retry="connect",
            expect=(200, 201),
        ).json()
        return rotated

    def revoke_key(self, key_id: str) -> dict[str, Any]:
        answer: dict[str, Any] = self.request(
            "DELETE", f"/api/v1/keys/{key_id}", auth="admin", retry="connect"
        ).json()
        return answer
