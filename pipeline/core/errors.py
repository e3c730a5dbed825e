"""Domain exceptions; the API maps each class to one HTTP status in `api/errors.py`."""

from __future__ import annotations

from typing import Any


class DomainError(Exception):
    """Base class: `detail` is safe to show to the caller (never a secret or a data value)."""

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


class InvalidInput(DomainError):
    """The request is malformed or a parameter is out of range (400)."""


class Unauthenticated(DomainError):
    """No credential, or one that does not verify (401)."""


class Forbidden(DomainError):
    """The caller is known but may not do this (403)."""


class NotFound(DomainError):
    """The resource does not exist, or is not visible to the caller (404)."""


class Conflict(DomainError):
    """The resource already exists or its state forbids the change (409)."""


class PayloadTooLarge(DomainError):
    """The body passed the configured size limit (413)."""


class Unprocessable(DomainError):
    """Well-formed input that fails a content rule (422)."""


class RateLimited(DomainError):
    """A per-key limit is exhausted (429); `retry_after` is in seconds when known."""

    def __init__(self, detail: str, retry_after: int | None = None) -> None:
        super().__init__(detail)
        self.retry_after = retry_after


class RowValidationFailed(DomainError):
    """Contribution rows fail the model's data-spec (400 with the spec §2.4 body)."""

    def __init__(self, detail: str, errors: list[dict[str, Any]]) -> None:
        super().__init__(detail)
        self.errors = errors
