"""The runner's error family: each error knows its HTTP status and its contract ``type``."""

from __future__ import annotations

import math

from contract.envelope import error_envelope


class RunnerError(Exception):
    """An error answered to the client in the error envelope (``contract.envelope``)."""

    status = 500
    type = "internal_error"

    def __init__(self, message: str, *, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.headers = headers or {}

    def as_dict(self) -> dict[str, dict[str, str]]:
        return error_envelope(self.type, self.message)


class BadRequest(RunnerError):
    """The body cannot be parsed at all (malformed JSON, bad base64, invalid UTF-8)."""

    status = 400
    type = "bad_request"


class Unauthorized(RunnerError):
    status = 401
    type = "unauthorized"


class Forbidden(RunnerError):
    status = 403
    type = "forbidden"


class NotFound(RunnerError):
    status = 404
    type = "not_found"


class PayloadTooLarge(RunnerError):
    status = 413
    type = "payload_too_large"


class UnsupportedMediaType(RunnerError):
    status = 415
    type = "unsupported_media_type"


class InvalidInput(RunnerError):
    """The body parses but its content is unusable (missing field, empty text, bad image)."""

    status = 422
    type = "invalid_input"


class QueueFull(RunnerError):
    status = 429
    type = "queue_full"

    def __init__(self, message: str = "the inference queue is full; retry shortly") -> None:
        super().__init__(message, headers={"Retry-After": "1"})


class RateLimited(RunnerError):
    status = 429
    type = "rate_limited"

    def __init__(self, retry_after_s: float) -> None:
        seconds = max(1, math.ceil(retry_after_s))
        super().__init__(
            f"this API key is over its rate limit; retry in {seconds} s",
            headers={"Retry-After": str(seconds)},
        )


class QueueTimeout(RunnerError):
    """The request waited longer than ``--max-queue-wait-ms`` and was dropped before inference."""

    status = 503
    type = "queue_timeout"

    def __init__(self, waited_ms: float) -> None:
        super().__init__(
            f"the request waited {waited_ms:.0f} ms in the queue and was dropped; retry shortly",
            headers={"Retry-After": "1"},
        )


class Unavailable(RunnerError):
    status = 503
    type = "unavailable"

    def __init__(self, message: str) -> None:
        super().__init__(message, headers={"Retry-After": "1"})


class NotReady(RunnerError):
    status = 503
    type = "not_ready"

    def __init__(self, message: str = "the model is still loading; retry shortly") -> None:
        super().__init__(message, headers={"Retry-After": "1"})


class ConfigError(Exception):
    """The manifest, arguments or model file cannot be served; the runner exits with code 2."""
