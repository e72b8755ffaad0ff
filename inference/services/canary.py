"""Canaries: another version of a deployment's model on a few extra replicas, taking a share of requests.

``deployment_canary_start`` sets ``canary_version`` and ``canary_percent`` (1-50); the reconciler keeps
``round(replicas * percent / 100)`` (at least one) canary replicas besides the deployment's own
(`services.rollouts.canary_wanted`), route entries mark them and carry the percentage, and the edge's
balancer sends about that share of requests to them (`inference.edge.balancer`). A canary replica
that fails, or none ready within ``LANTAU_ROLLOUT_READY_TIMEOUT_S``, aborts the canary by itself.
``deployment_canary_promote`` makes the canary version the deployment's (an ordinary rollout, whose
``from`` is the version before the canary: the canary's replicas are adopted as they run the new
settings already); ``deployment_canary_abort`` retires its replicas. ``canary_figures`` puts both
versions' latest live figures side by side.
"""

from __future__ import annotations

import logging

from django.db import transaction

from accounts.models import Team
from accounts.permissions import permission_require
from accounts.services import audit_record
from core.errors import Conflict, ValidationFailed
from inference.models import Deployment, ReplicaState
from inference.services.deployment_changes import deployment_changed
from inference.services.deployments import _check_same_model, _servable_version
from inference.services.rollouts import (
    CANARY,
    IN_PROGRESS,
    canary_abort,
    rollout_begin,
    rollout_spec,
)
from inference.summaries import latest_summaries

log = logging.getLogger("lantau.rollouts")
MAX_PERCENT = 50


def _locked(deployment: Deployment) -> Deployment:
    return Deployment.objects.select_for_update().select_related("model_version").get(pk=deployment.pk)


def deployment_canary_start(
    *, team: Team, actor, deployment: Deployment, model_version_id: int, percent: int
) -> Deployment:
    """Start a canary of another version of the deployment's model, or change a running one's share."""
    permission_require(team=team, user=actor, action="deployment.update")
    if not 1 <= percent <= MAX_PERCENT:
        raise ValidationFailed(f"canary_percent must be between 1 and {MAX_PERCENT}")
    version = _servable_version(team=team, model_version_id=model_version_id)
    _check_same_model(deployment, version)
    with transaction.atomic():
        deployment = _locked(deployment)
        if version.pk == deployment.model_version_id:
            raise ValidationFailed(f"{version} is the version {deployment.name!r} runs already")
        running = deployment.rollout or {}
        if running.get("state") == IN_PROGRESS and running.get("kind", "update") != CANARY:
            raise Conflict(f"{deployment.name!r} is rolling out: wait for it to finish or roll it back first")
        if deployment.canary_version_id not in (None, version.pk):
            raise Conflict(
                f"{deployment.name!r} runs a canary of {deployment.canary_version}: promote or abort it first"
            )
        before = {
            "canary_version": str(deployment.canary_version or ""),
            "canary_percent": deployment.canary_percent,
        }
        fresh = deployment.canary_version_id is None
        deployment.canary_version, deployment.canary_percent = version, percent
        if fresh:
            rollout_begin(deployment, before=rollout_spec(deployment), kind=CANARY, percent=percent)
            deployment.rollout["to"] = {**deployment.rollout["to"], "model_version_id": version.pk,
                                        "model_version": str(version)}  # fmt: skip
        else:
            deployment.rollout = {**(deployment.rollout or {}), "percent": percent}
        deployment.save()
        audit_record(team=team, actor=actor, action="deployment.canary", target=deployment.name, before=before,
                     after={"canary_version": str(version), "canary_percent": percent})  # fmt: skip
        deployment_changed(deployment, reconcile=True)
    return deployment


def deployment_canary_promote(*, team: Team, actor, deployment: Deployment) -> Deployment:
    """Make the canary's version the deployment's: its own replicas roll over to it one at a time."""
    permission_require(team=team, user=actor, action="deployment.update")
    with transaction.atomic():
        deployment = _locked(deployment)
        version = deployment.canary_version
        if version is None:
            raise Conflict(f"{deployment.name!r} runs no canary")
        before = rollout_spec(deployment)
        deployment.model_version, deployment.canary_version, deployment.canary_percent = version, None, 0
        rollout_begin(deployment, before=before, promoted_canary=True)
        deployment.save()
        audit_record(team=team, actor=actor, action="deployment.canary_promote", target=deployment.name,
                     before=before, after=rollout_spec(deployment))  # fmt: skip
        deployment_changed(deployment, reconcile=True)
    return deployment


def deployment_canary_abort(*, team: Team, actor, deployment: Deployment) -> Deployment:
    """End the canary: its replicas retire; the deployment's own never stopped serving."""
    permission_require(team=team, user=actor, action="deployment.update")
    with transaction.atomic():
        deployment = _locked(deployment)
        if deployment.canary_version_id is None:
            raise Conflict(f"{deployment.name!r} runs no canary")
        who = getattr(actor, "username", "") or "someone"
        canary_abort(deployment, f"aborted by {who}", actor=actor)
        deployment_changed(deployment, reconcile=True)
    return deployment


def _group(summaries: list[dict], replicas: int) -> dict:
    requests = sum(int(s.get("requests") or 0) for s in summaries)
    errors = sum(int(s.get("errors") or 0) for s in summaries)

    def latency(name: str) -> float | None:  # weighted by each replica's requests in the window
        weighted = [(s.get("latency_ms", {}).get(name), int(s.get("requests") or 0)) for s in summaries]
        weighted = [(v, n) for v, n in weighted if isinstance(v, int | float) and n > 0]
        total = sum(n for _, n in weighted)
        return round(sum(v * n for v, n in weighted) / total, 3) if total else None

    return {
        "replicas": replicas,
        "reporting": len(summaries),
        "requests_per_s": round(sum(float(s.get("requests_per_s") or 0) for s in summaries), 2),
        "error_rate": round(errors / requests, 4) if requests else None,
        "latency_ms_p50": latency("p50"),
        "latency_ms_p95": latency("p95"),
    }


def canary_figures(deployment: Deployment) -> dict | None:
    """Both versions side by side from the runners' latest per-second summaries in Redis (one second
    each, request-weighted latency percentiles); None without a canary, figures empty without Redis."""
    if deployment.canary_version_id is None:
        return None
    replicas = [r for r in deployment.replica_set.all() if r.state == ReplicaState.READY]
    found = latest_summaries(deployment.name, [r.pk for r in replicas])
    sides: dict[str, tuple[list[dict], int]] = {"stable": ([], 0), "canary": ([], 0)}
    for replica in replicas:
        side = "canary" if replica.model_version_id == deployment.canary_version_id else "stable"
        summaries, count = sides[side]
        sides[side] = (summaries + ([found[replica.pk]] if replica.pk in found else []), count + 1)
    return {"version": str(deployment.canary_version), "percent": deployment.canary_percent,
            "window_s": 1, **{side: _group(summaries, count) for side, (summaries, count) in sides.items()}}  # fmt: skip
