"""Rollouts: a change of what a deployment's replicas run, followed to its end or rolled back by itself.

A change of version or runtime settings (`services.deployments.deployment_update`) starts a rollout:
`rollout_begin` stores, in `Deployment.rollout`, the settings before it (``from``, what a rollback
returns to) and after it (``to``). The reconciler then replaces replicas one at a time (the old ones
keep serving until new ones are ready) and, on every pass under the deployment's row lock, calls
`rollout_step`, which records progress and the end, or names why the rollout failed:

* a new replica turned FAILED (its node agent gave it up: it crash-looped past ``--max-restarts``, or
  its runner refused the model or the settings, e.g. an ONNX graph onnxruntime cannot load);
* no further new replica became ready within ``LANTAU_ROLLOUT_READY_TIMEOUT_S`` (it never became
  ready, or could not be placed).

`rollout_rollback` then puts the ``from`` settings back (recorded with its reason and an audit event
``deployment.rollback``); the reconciler's same pass retires the new replicas, and the old ones, which
never stopped serving, are the deployment's replicas again. People may also roll back by hand
(``POST /api/v1/deployments/{name}/rollback``) while a rollout runs or after it is done.

States of ``rollout["state"]``: in_progress -> done | rolled_back | failed (a rollback that cannot
happen because the earlier version is gone; the deployment keeps its new settings).
"""

from __future__ import annotations

import hashlib
import json
import logging
from datetime import datetime

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from accounts.models import Team
from accounts.permissions import permission_require
from accounts.services import audit_record
from core.errors import Conflict
from inference import queue
from inference.models import Deployment, ModelVersion, NodeStatus, Replica, ReplicaState
from inference.services.deployment_changes import deployment_changed

log = logging.getLogger("lantau.rollouts")

IN_PROGRESS, DONE, ROLLED_BACK, FAILED = "in_progress", "done", "rolled_back", "failed"
ABORTED, CANARY = "aborted", "canary"  # a canary's end without promotion, and its `kind`
# What a rollout changes and a rollback restores, with the version (see `spec_digest`).
RUNTIME_FIELDS = ("device", "max_batch_size", "max_queue_delay_ms", "node_selector", "region")


def spec_digest(deployment: Deployment, version_id: int | None = None) -> str:
    """A short digest of what a replica runs (version, device, batching, selector, region): a replica whose
    digest differs from its deployment's is outdated and gets replaced, one at a time. ``version_id``
    names another version (a canary's) with the same settings."""
    runtime = {
        "version": version_id or deployment.model_version_id,
        "device": deployment.device,
        "batch": [deployment.max_batch_size, deployment.max_queue_delay_ms],
        "selector": deployment.node_selector or {},
        "region": deployment.region,  # a new preference moves replicas over, one at a time
    }
    return hashlib.sha256(json.dumps(runtime, sort_keys=True).encode()).hexdigest()[:16]


def canary_digest(deployment: Deployment) -> str | None:
    """The digest of the deployment's canary replicas; None when it runs no canary."""
    if deployment.canary_version_id is None or not deployment.canary_percent:
        return None
    return spec_digest(deployment, deployment.canary_version_id)


def canary_wanted(deployment: Deployment, want: int) -> int:
    """Canary replicas come on top of ``want``: the percentage of it, rounded, at least one."""
    if canary_digest(deployment) is None or want <= 0:
        return 0
    return max(1, round(want * deployment.canary_percent / 100))


def rollout_spec(deployment: Deployment) -> dict:
    """The settings replicas run with, as stored in ``rollout["from"]``/``["to"]``."""
    spec: dict = {k: getattr(deployment, k) for k in RUNTIME_FIELDS}
    spec["node_selector"] = dict(spec["node_selector"] or {})
    return {"model_version_id": deployment.model_version_id, "model_version": str(deployment.model_version),
            **spec}  # fmt: skip


def _now() -> str:
    return timezone.now().isoformat()


def _age_s(stamp: str | None) -> float:
    if not stamp:
        return 0.0
    return (timezone.now() - datetime.fromisoformat(stamp)).total_seconds()


def rollout_begin(deployment: Deployment, *, before: dict, kind: str = "update", **extra: object) -> None:
    """Start a rollout from ``before`` to the deployment's settings now (saved by the caller). A change
    during an update keeps its ``from``: a rollback returns to the last settings that ran."""
    current = deployment.rollout or {}
    running = current.get("state") == IN_PROGRESS and current.get("kind", "update") != CANARY
    start = current["from"] if running and current.get("from") else before
    now = _now()
    deployment.rollout = {"kind": kind, "state": IN_PROGRESS, "from": start, "to": rollout_spec(deployment),
                          "reason": "", "started_at": now, "progress_at": now, "finished_at": None,
                          "new_ready": 0, **extra}  # fmt: skip


def rollout_step(deployment: Deployment, replicas: list[Replica], digest: str, want: int) -> str | None:
    """Record the rollout's progress or end on ``deployment.rollout`` (saved here); return why it must
    be rolled back (a canary: aborted), or None. ``replicas``: those of the track followed (an update:
    all of the deployment's; a canary: its canary replicas, ``digest`` theirs, ``want`` their number),
    dead ones included, before the reconciler removes any. A canary never ends here: people promote or
    abort it."""
    rollout = dict(deployment.rollout or {})
    if rollout.get("state") != IN_PROGRESS:
        return None
    new = [r for r in replicas if r.spec == digest]
    failed = next((r for r in new if r.state == ReplicaState.FAILED), None)
    if failed is not None:
        why = (failed.error or "no reason given").strip().splitlines()[0][:300]
        return f"new replica r{failed.pk} failed on node {failed.node.name}: {why}"
    online = [r for r in replicas if r.node.status == NodeStatus.ONLINE and r.state != ReplicaState.FAILED]
    ready = sum(1 for r in online if r.spec == digest and r.state == ReplicaState.READY)
    old = [r for r in online if r.spec != digest]
    if ready > int(rollout.get("new_ready") or 0):
        rollout |= {"new_ready": ready, "progress_at": _now()}
        rollout.setdefault("first_ready_at", rollout["progress_at"])
    if rollout.get("kind") != CANARY and (want == 0 or (ready >= want and not old)):
        rollout |= {"state": DONE, "finished_at": _now()}
    elif ready < want and _age_s(rollout.get("progress_at")) > settings.ROLLOUT_READY_TIMEOUT_S:
        return _timeout_reason(deployment, new)
    if rollout != deployment.rollout:
        deployment.rollout = rollout
        Deployment.objects.filter(pk=deployment.pk).update(rollout=rollout)
    return None


def rollout_baking(deployment: Deployment) -> bool:
    """Whether an update's first new replica is still serving beside the old ones for its
    ``LANTAU_ROLLOUT_BAKE_S``, watched for errors (`rollout_watch`): no old replica retires meanwhile."""
    rollout = deployment.rollout or {}
    if not settings.ROLLOUT_BAKE_S or rollout.get("state") != IN_PROGRESS or rollout.get("kind") == CANARY:
        return False
    first = rollout.get("first_ready_at")
    return not first or _age_s(first) < settings.ROLLOUT_BAKE_S


def _timeout_reason(deployment: Deployment, new: list[Replica]) -> str:
    reason = f"no new replica became ready within {settings.ROLLOUT_READY_TIMEOUT_S} s"
    waiting = [r for r in new if r.state != ReplicaState.READY]
    if waiting:
        r = waiting[-1]
        return f"{reason}: r{r.pk} on {r.node.name} is {r.state}" + (f" ({r.error[:200]})" if r.error else "")
    note = (deployment.placement or {}).get("note") or "none could be placed"
    return f"{reason}: {note}"


def rollout_rollback(deployment: Deployment, reason: str, *, actor=None) -> bool:
    """Put the settings before the rollout back (the caller holds the row lock and reconciles after);
    False, with the rollout marked failed, when that version no longer exists."""
    rollout = dict(deployment.rollout or {})
    target = rollout.get("from") or {}
    version_id = target.get("model_version_id")
    version = (
        ModelVersion.objects.filter(pk=version_id, model_id=deployment.model_version.model_id).first()
        if isinstance(version_id, int)
        else None
    )
    if version is None:
        rollout |= {"state": FAILED, "finished_at": _now(),
                    "reason": f"{reason}; cannot roll back: version {target.get('model_version')} is gone"}  # fmt: skip
        Deployment.objects.filter(pk=deployment.pk).update(rollout=rollout)
        deployment.rollout = rollout
        return False
    before = rollout_spec(deployment)
    for key in RUNTIME_FIELDS:
        setattr(deployment, key, target.get(key, getattr(deployment, key)))
    deployment.model_version = version
    deployment.rollout = rollout | {"state": ROLLED_BACK, "reason": reason, "finished_at": _now()}
    deployment.save(update_fields=[*RUNTIME_FIELDS, "model_version", "rollout", "updated_at"])
    log.warning("deployment %s rolled back to %s: %s", deployment.name, version, reason)
    audit_record(team=deployment.team, actor=actor, action="deployment.rollback", target=deployment.name,
                 before=before, after=rollout_spec(deployment), data={"reason": reason})  # fmt: skip
    deployment_changed(deployment)
    return True


def deployment_rollback(*, team: Team, actor, deployment: Deployment) -> Deployment:
    """Roll back by hand to the settings before the last rollout (running or done); 409 when there is
    none to return to. The reconciler replaces replicas as for any rollout, old ones serving meanwhile."""
    permission_require(team=team, user=actor, action="deployment.update")
    with transaction.atomic():
        deployment = (
            Deployment.objects.select_for_update().select_related("model_version").get(pk=deployment.pk)
        )
        rollout = deployment.rollout or {}
        if rollout.get("state") not in (IN_PROGRESS, DONE) or not rollout.get("from"):
            raise Conflict(f"{deployment.name!r} has no rollout to roll back")
        if deployment.canary_version_id is not None:
            raise Conflict(f"{deployment.name!r} runs a canary: promote or abort it first")
        who = getattr(actor, "username", "") or "someone"
        if not rollout_rollback(deployment, f"rolled back by {who}", actor=actor):
            raise Conflict(deployment.rollout["reason"])
        queue.deployment_reconcile_later(deployment.pk)
    return deployment


def canary_abort(deployment: Deployment, reason: str, *, actor=None) -> None:
    """End the canary without promoting it (the caller holds the row lock and reconciles after): its
    replicas retire, the deployment's own never stopped serving."""
    before = {"canary_version": str(deployment.canary_version), "canary_percent": deployment.canary_percent}
    deployment.canary_version = None
    deployment.canary_percent = 0
    deployment.rollout = dict(deployment.rollout or {}) | {
        "state": ABORTED,
        "reason": reason,
        "finished_at": _now(),
    }
    deployment.save(update_fields=["canary_version", "canary_percent", "rollout", "updated_at"])
    log.warning("canary of %s aborted: %s", deployment.name, reason)
    audit_record(team=deployment.team, actor=actor, action="deployment.canary_abort", target=deployment.name,
                 before=before, data={"reason": reason})  # fmt: skip
    deployment_changed(deployment)
