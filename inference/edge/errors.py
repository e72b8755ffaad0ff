"""The edge's answers besides the runner's own error family (``inference.runner.errors``)."""

from __future__ import annotations

from inference.runner.errors import RunnerError


class MethodNotAllowed(RunnerError):
    status = 405
    type = "method_not_allowed"


class QuotaExceeded(RunnerError):
    status = 429
    type = "quota_exceeded"


class TooManyInFlight(RunnerError):
    status = 429
    type = "too_many_in_flight"


class NoReplica(RunnerError):
    """503: no replica of the deployment can take the request (none ready, or every breaker open)."""

    status = 503
    type = "unavailable"


class UpstreamTimeout(RunnerError):
    """504: the replica(s) tried did not answer within the upstream timeout."""

    status = 504
    type = "upstream_timeout"
