"""Runners' per-second summaries, sealed with the replica's runner token (review M-A).

A runner publishes a summary each second (``inference.runner.live``) and keeps the last one under
``<p>:metrics:last:<deployment>:<replica>``. The console acts on them: the rollout watch rolls back on
their error counts, autoscaling scales on their rates, the canary figures and live charts show them.
Anyone who can write Redis could plant one, so each summary travels sealed:

    {"body": "<the summary as JSON text>", "sig": "<hex HMAC-SHA256 of context + body>"}

keyed by the replica's runner token (``inference.services.nodes.runner_token``: derived by the console,
handed to the agent for that replica alone). The context binds the install's Redis prefix, the
deployment and the replica, so a seal made for one replica cannot pass as another's or another
install's. The body names its deployment, replica and time (``ts``); readers refuse a summary whose
names differ from the key's or that is older than ``MAX_AGE_S``, which bounds replay to its own
replica's last minute. A host that runs a replica holds its token and can still seal false figures for
that replica (as it can answer its requests falsely); it cannot speak for a replica elsewhere.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import math
import time
from typing import Any

MAX_SEALED_BYTES = 64 * 1024
MAX_AGE_S = 60.0  # older summaries are replays or from a stopped replica; runners write one each second
MAX_AHEAD_S = 30.0  # clock skew allowed between a node and the console


class SummaryRefused(ValueError):
    """A sealed summary that is not what the replica's runner wrote (the message says why)."""


def _context(prefix: str, deployment: str, replica: str) -> bytes:
    return f"lantau-summary:v1:{prefix}:{deployment}:{replica}:".encode()


def _mac(token: str, prefix: str, deployment: str, replica: str, body: bytes) -> str:
    return hmac.new(token.encode(), _context(prefix, deployment, replica) + body, hashlib.sha256).hexdigest()


def summary_seal(body: str, *, token: str, prefix: str, deployment: str, replica: str) -> str:
    """The sealed form of a summary (JSON text) as it goes to Redis."""
    sig = _mac(token, prefix, deployment, replica, body.encode())
    return json.dumps({"body": body, "sig": sig}, separators=(",", ":"))


def _no_constant(name: str) -> float:
    raise SummaryRefused(f"{name} is not a number")


def summary_open(
    raw: object, *, token: str, prefix: str, deployment: str, replica: str, now: float | None = None
) -> dict[str, Any]:
    """The summary inside ``raw`` as a dict, once its seal, names and age are checked; else SummaryRefused."""
    if not isinstance(raw, bytes | str) or len(raw) > MAX_SEALED_BYTES:
        raise SummaryRefused("not a short string")
    try:
        sealed = json.loads(raw, parse_constant=_no_constant)
    except (ValueError, RecursionError) as exc:
        raise SummaryRefused(f"not JSON ({str(exc)[:60]})") from None
    if not isinstance(sealed, dict) or set(sealed) != {"body", "sig"}:
        raise SummaryRefused("not a sealed summary (an object of body and sig)")
    body, sig = sealed["body"], sealed["sig"]
    if not isinstance(body, str) or not isinstance(sig, str):
        raise SummaryRefused("body and sig must be strings")
    if not hmac.compare_digest(sig, _mac(token, prefix, deployment, replica, body.encode())):
        raise SummaryRefused("its seal is not the replica's")
    try:
        summary = json.loads(body, parse_constant=_no_constant)
    except (ValueError, RecursionError) as exc:
        raise SummaryRefused(f"body is not JSON ({str(exc)[:60]})") from None
    if not isinstance(summary, dict):
        raise SummaryRefused("body is not a JSON object")
    if summary.get("deployment") != deployment or str(summary.get("replica")) != str(replica):
        raise SummaryRefused("it names another deployment or replica")
    ts = summary.get("ts")
    if isinstance(ts, bool) or not isinstance(ts, int | float) or not math.isfinite(ts):
        raise SummaryRefused("ts is not a time")
    now = time.time() if now is None else now
    if not now - MAX_AGE_S <= ts <= now + MAX_AHEAD_S:
        raise SummaryRefused(f"it is {now - ts:.0f} s old")
    return summary
