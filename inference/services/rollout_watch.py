"""Watching rollouts and canaries by their error rate, from the runners' per-second summaries in Redis.

Runners publish a summary every second (requests, 5xx answers as ``errors``, latency percentiles, queue
depth); ``inference.summaries.latest_summaries`` reads the checked ones (sealed by the replica's runner
token, every field within its bound), as autoscaling, the canary figures and the overview do.

``rollouts_watch`` (celery beat, every ``LANTAU_ROLLOUT_WATCH_S``) adds the new replicas' summaries
of each running rollout or canary to its counts (each summary once, by its time stamp); once they hold
``LANTAU_ROLLOUT_MIN_REQUESTS`` requests and more than ``LANTAU_ROLLOUT_MAX_ERROR_PERCENT`` of them
failed, the rollout is rolled back (a canary aborted) with the figures as the reason. Summaries are
sampled, so a watch every few seconds counts a share of the requests, enough for a rate. With
``LANTAU_ROLLOUT_BAKE_S`` the first new replica serves beside the old ones for that long before any
old one retires (`services.rollouts.rollout_baking`), which is when a bad version shows its errors
while the old one still serves.
"""

from __future__ import annotations

import logging

from django.conf import settings
from django.db import InterfaceError, OperationalError, transaction

from inference.models import Deployment, ReplicaState
from inference.services.deployment_changes import deployment_changed
from inference.services.rollouts import (
    CANARY,
    IN_PROGRESS,
    canary_abort,
    canary_digest,
    rollout_baking,
    rollout_rollback,
    spec_digest,
)
from inference.summaries import latest_summaries

log = logging.getLogger("lantau.rollouts")


def rollouts_watch() -> int:
    """Celery beat: count the new replicas' errors of every running rollout and canary; the number seen."""
    ids = list(Deployment.objects.filter(rollout__state=IN_PROGRESS).values_list("pk", flat=True))
    for pk in ids:
        try:
            rollout_watch(pk)
        except (OperationalError, InterfaceError):
            raise  # the database is down: the next beat tries again
        except Exception:  # one deployment's trouble must not stop watching the others' rollouts
            log.exception("watching the rollout of deployment %s failed", pk)
    return len(ids)


def rollout_watch(deployment_id: int) -> str | None:
    """One look at a rollout's or canary's new replicas; the reason when it rolled back or aborted."""
    with transaction.atomic():
        deployment = (
            Deployment.objects.select_for_update()
            .select_related("model_version")
            .filter(pk=deployment_id)
            .first()
        )
        rollout = dict((deployment.rollout if deployment else None) or {})
        if deployment is None or rollout.get("state") != IN_PROGRESS:
            return None
        canary = rollout.get("kind") == CANARY
        digest = canary_digest(deployment) if canary else spec_digest(deployment)
        new = [
            r.pk for r in deployment.replica_set.all() if r.spec == digest and r.state == ReplicaState.READY
        ]
        counts = _counted(rollout.get("watch") or {}, latest_summaries(deployment.name, new))
        was_baking = rollout.get("watch", {}).get("baking", False)
        counts["baking"] = rollout_baking(deployment)
        deployment.rollout = rollout | {"watch": counts}
        Deployment.objects.filter(pk=deployment.pk).update(rollout=deployment.rollout)
        reason = _verdict(counts)
        if reason and canary:
            canary_abort(deployment, reason)
        elif reason:
            rollout_rollback(deployment, reason)
        if reason or (was_baking and not counts["baking"]):  # rolled back, or the old ones may retire now
            deployment_changed(deployment, reconcile=True)
    return reason


def _counted(counts: dict, summaries: dict[int, dict]) -> dict:
    seen = dict(counts.get("seen") or {})
    requests, errors = int(counts.get("requests") or 0), int(counts.get("errors") or 0)
    for pk, summary in summaries.items():
        stamp = summary.get("ts")
        if stamp is None or seen.get(str(pk)) == stamp:
            continue  # the same second read twice
        seen[str(pk)] = stamp
        requests += summary.get("requests", 0)  # counts checked by summary_checked: ints, 0..bound
        errors += summary.get("errors", 0)
    return {"requests": requests, "errors": errors, "seen": seen}


def _verdict(counts: dict) -> str | None:
    requests, errors = counts["requests"], counts["errors"]
    limit = settings.ROLLOUT_MAX_ERROR_PERCENT
    if requests < settings.ROLLOUT_MIN_REQUESTS or errors * 100 <= limit * requests:
        return None
    return (
        f"the new replicas answered {errors} of {requests} sampled requests with errors "
        f"({100 * errors / requests:.0f}%, above {limit}%)"
    )
