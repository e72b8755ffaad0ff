"""The management API (`/api/v1/`): one NinjaAPI mounting each app's router, one error handler."""

from __future__ import annotations

from django.db import DataError, InterfaceError, OperationalError
from django.http import Http404
from django.http.multipartparser import MultiPartParserError
from ninja import NinjaAPI
from ninja.errors import AuthenticationError, HttpError
from ninja.errors import ValidationError as NinjaValidationError

from accounts.api import router as accounts_router
from accounts.api_audit import router as audit_router
from accounts.api_team import router as team_router
from accounts.api_team import teams_router
from accounts.auth import team_auth
from contract.envelope import error_envelope
from core.errors import ApplicationError
from core.schemas import validation_message
from evalsets.api import router as datasets_router
from inference.api.deployments import router as deployments_router
from inference.api.fleet import router as fleet_router
from inference.api.jobs import router as jobs_router
from inference.api.models import router as models_router
from inference.api.nodes import router as nodes_router
from inference.api.regions import router as regions_router

api = NinjaAPI(
    title="Lantau management API",
    version="1",
    urls_namespace="api",
    auth=team_auth,
    description="Models, deployments, nodes and API keys. Authenticate with a session or a `manage`-scoped API key.",
)


def _error(request, status: int, type_: str, message: str, headers: dict | None = None):
    response = api.create_response(request, error_envelope(type_, message), status=status)
    for key, value in (headers or {}).items():
        response[key] = value
    return response


@api.exception_handler(ApplicationError)
def on_application_error(request, exc: ApplicationError):
    return _error(request, exc.status, exc.type, exc.message, exc.headers)


@api.exception_handler(AuthenticationError)
def on_auth_error(request, exc):
    return _error(request, 401, "unauthorized", "sign in or send a valid API key with the `manage` scope")


@api.exception_handler(NinjaValidationError)
def on_validation_error(request, exc: NinjaValidationError):
    return _error(request, 422, "validation_error", validation_message(exc.errors))


@api.exception_handler(OperationalError)
@api.exception_handler(InterfaceError)
def on_database_lost(request, exc):
    # PostgreSQL restarting or unreachable: a clean "retry shortly" rather than a 500.
    return _error(
        request, 503, "unavailable", "the database is unavailable; retry shortly", {"Retry-After": "5"}
    )


@api.exception_handler(DataError)
def on_unstorable_value(request, exc):
    # PostgreSQL refusing a value the schemas let through (a NUL character, a number out of range):
    # the client's input, so a 422 rather than a 500.
    return _error(
        request,
        422,
        "validation_error",
        "a value cannot be stored: out of range, or holding a NUL (\\u0000) character",
    )


@api.exception_handler(MultiPartParserError)
def on_bad_multipart(request, exc):
    # Raised while ninja reads the form, before any view runs (a missing or broken boundary).
    return _error(
        request, 400, "bad_request", "malformed multipart body: send a multipart/form-data boundary"
    )


@api.exception_handler(Http404)
def on_not_found(request, exc):
    return _error(request, 404, "not_found", "not found")


@api.exception_handler(HttpError)
def on_http_error(request, exc: HttpError):
    return _error(request, exc.status_code, "error", str(exc))


@api.exception_handler(Exception)
def on_unexpected(request, exc):
    import logging

    logging.getLogger("console.api").exception("unhandled error in %s", request.path)
    return _error(request, 500, "internal_error", "internal error; the details are in the server log")


api.add_router("/keys", accounts_router)
api.add_router("/team", team_router)
api.add_router("/teams", teams_router)
api.add_router("/audit", audit_router)
api.add_router("/models", models_router)
api.add_router("/deployments", deployments_router)
api.add_router("/nodes", nodes_router)
api.add_router("/fleet", fleet_router)
api.add_router("/regions", regions_router)
api.add_router("/jobs", jobs_router)
api.add_router("/datasets", datasets_router)
