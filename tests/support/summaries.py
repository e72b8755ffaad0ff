"""Runners' per-second summaries as a runner writes them: sealed with the replica's runner token."""

from __future__ import annotations

import json
import time

from django.conf import settings

from contract.summaries import summary_seal
from inference.credentials import runner_token


def sealed_summary(deployment: str, replica: int, **fields) -> str:
    """The sealed summary ``inference.runner.live`` would publish for ``replica`` (``ts`` now unless given)."""
    body = {"deployment": deployment, "replica": str(replica), "ts": round(time.time(), 3), **fields}
    return summary_seal(json.dumps(body), token=runner_token(replica), prefix=settings.REDIS_PREFIX,
                        deployment=deployment, replica=str(replica))  # fmt: skip
