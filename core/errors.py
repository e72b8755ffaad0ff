"""One family of domain errors, mapped to the JSON error contract in one place (console.api)."""

from __future__ import annotations

from contract.envelope import error_envelope


class ApplicationError(Exception):
    status = 400
    type = "bad_request"

    def __init__(self, message: str, *, headers: dict[str, str] | None = None):
        super().__init__(message)
        self.message = message
        self.headers = headers or {}

    def as_dict(self) -> dict:
        return error_envelope(self.type, self.message)


class BadRequest(ApplicationError):
    status, type = 400, "bad_request"


class Unauthorized(ApplicationError):
    status, type = 401, "unauthorized"


class Forbidden(ApplicationError):
    status, type = 403, "forbidden"


class NotFound(ApplicationError):
    status, type = 404, "not_found"


class Conflict(ApplicationError):
    status, type = 409, "conflict"


class PayloadTooLarge(ApplicationError):
    status, type = 413, "payload_too_large"


class UnsupportedMediaType(ApplicationError):
    status, type = 415, "unsupported_media_type"


class ValidationFailed(ApplicationError):
    status, type = 422, "validation_error"


class Unavailable(ApplicationError):
    status, type = 503, "unavailable"
