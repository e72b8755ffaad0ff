"""Autoscaling: move a deployment's ``replicas`` between its bounds so each replica has about its target
of requests in flight.

``deployment_autoscaling_set`` (people) stores the bounds (``min_replicas``..``max_replicas``; 0 as the
maximum turns autoscaling off), the target and the cool-down. Celery beat runs ``deployments_autoscale``
every ``LANTAU_AUTOSCALE_EVERY_S``: for each running deployment with autoscaling it samples the requests
in flight from the runners' latest per-second summaries in Redis (Little's law per ready replica:
requests per second times median latency), keeps the samples of the last ``LANTAU_AUTOSCALE_WINDOW_S``
and decides:

* out, when the window's mean needs more replicas than it has (never past ``max_replicas``);
* in, when even the window's peak fits in fewer (never under ``min_replicas``), once a whole window
  passed since the last change;
* back within the bounds when ``replicas`` is outside them (changed by hand, or new bounds).

Any change waits ``scale_cooldown_s`` after the previous one. Each change is recorded with its reason
in ``Deployment.autoscale["decisions"]`` (the last 20, shown by the API) and as an audit event
``deployment.autoscale``; the reconciler then places or removes replicas as for any scaling.

Scale to zero: with ``min_replicas`` 0, scaling in stops at one replica, and the deployment goes to no
replica once ``scale_to_zero_after_s`` passed without a request (a sample above zero marks the window
busy; so do a wake-up and a replica not ready yet). Its route then says ``scales_from_zero``: an edge (or the console's
``/v1/``) holding a request sends ``contract.wake.WAKE_TASK``, whose ``deployment_wake`` scales it to
``max(1, min_replicas)`` with that reason; the held request is served once the replica is ready.
"""

from __future__ import annotations

import logging
import math
import time

from django.conf import settings
from django.db import InterfaceError, OperationalError, transaction
from django.utils import timezone

from accounts.models import Team
from accounts.permissions import permission_require
from accounts.services import audit_record
from core.errors import ValidationFailed
from inference.models import Deployment, DesiredState, ReplicaState
from inference.services.deployment_changes import deployment_changed
from inference.summaries import latest_summaries

log = logging.getLogger("lantau.autoscale")
MAX_REPLICAS = 32
DECISIONS_KEPT = 20


def deployment_autoscaling_set(
    *, team: Team, actor, deployment: Deployment, min_replicas: int, max_replicas: int,
    target_inflight_per_replica: float, scale_cooldown_s: int, scale_to_zero_after_s: int = 300,
) -> Deployment:  # fmt: skip
    """Set (or with ``max_replicas`` 0 turn off) the deployment's autoscaling; 422 naming the field."""
    permission_require(team=team, user=actor, action="deployment.update")
    if max_replicas and not (0 <= min_replicas <= max_replicas <= MAX_REPLICAS and max_replicas >= 1):
        raise ValidationFailed(
            f"min_replicas and max_replicas must satisfy 0 <= min <= max <= {MAX_REPLICAS}"
        )
    if not max_replicas and not 1 <= min_replicas <= MAX_REPLICAS:
        raise ValidationFailed(
            f"min_replicas must be between 1 and {MAX_REPLICAS} without autoscaling (0 needs max_replicas)"
        )
    if not (math.isfinite(target_inflight_per_replica) and 0.1 <= target_inflight_per_replica <= 10_000):
        raise ValidationFailed("target_inflight_per_replica must be between 0.1 and 10000")
    if not 0 <= scale_cooldown_s <= 86_400:
        raise ValidationFailed("scale_cooldown_s must be between 0 and 86400")
    if not 1 <= scale_to_zero_after_s <= 86_400:
        raise ValidationFailed("scale_to_zero_after_s must be between 1 and 86400")
    fields = {"min_replicas": min_replicas, "max_replicas": max_replicas,
              "target_inflight_per_replica": target_inflight_per_replica, "scale_cooldown_s": scale_cooldown_s,
              "scale_to_zero_after_s": scale_to_zero_after_s}  # fmt: skip
    with transaction.atomic():
        deployment = Deployment.objects.select_for_update().get(pk=deployment.pk)
        before = {k: getattr(deployment, k) for k in fields}
        for key, value in fields.items():
            setattr(deployment, key, value)
        deployment.save(update_fields=[*fields, "updated_at"])
        audit_record(team=team, actor=actor, action="deployment.autoscaling", target=deployment.name,
                     before=before, after=fields)  # fmt: skip
        deployment_changed(deployment)  # whether requests finding no replica are held changes with these
    if max_replicas:
        deployment_autoscale(deployment.pk)  # into the new bounds at once
    return Deployment.objects.get(pk=deployment.pk)


def deployments_autoscale() -> int:
    """Celery beat: sample and decide for every running deployment with autoscaling; the number seen."""
    ids = list(
        Deployment.objects.filter(max_replicas__gt=0, desired_state=DesiredState.RUNNING).values_list(
            "pk", flat=True
        )
    )
    for pk in ids:
        try:
            deployment_autoscale(pk)
        except (OperationalError, InterfaceError):
            raise  # the database is down: the next beat tries again
        except Exception:  # one deployment's trouble must not stop the others' scaling
            log.exception("autoscaling deployment %s failed", pk)
    return len(ids)


def inflight_now(deployment: Deployment) -> float | None:
    """Requests in flight on the ready replicas now, from their latest summaries; None when none reported
    (no ready replica, or Redis unreachable): no sample is better than a made-up zero."""
    ready = [r.pk for r in deployment.replica_set.all() if r.state == ReplicaState.READY]
    total, seen = 0.0, 0
    for summary in latest_summaries(deployment.name, ready).values():
        try:
            rate, p50 = float(summary["requests_per_s"]), float(summary["latency_ms"]["p50"])
        except (TypeError, ValueError, KeyError):
            continue
        total += max(0.0, rate) * max(0.0, p50) / 1000
        seen += 1
    return total if seen else None


def _locked_autoscaled(**lookup: object) -> Deployment | None:
    """The deployment's row, locked for this transaction, when it autoscales and runs; else None."""
    deployment = Deployment.objects.select_for_update().filter(**lookup).first()
    if deployment is None or not deployment.max_replicas or deployment.desired_state != DesiredState.RUNNING:
        return None
    return deployment


def deployment_autoscale(deployment_id: int, *, now: float | None = None) -> dict | None:
    """Take one sample and apply the decision, if any (see the module's rules); the decision or None."""
    now = time.time() if now is None else now
    with transaction.atomic():
        deployment = _locked_autoscaled(pk=deployment_id)
        if deployment is None:
            return None
        state = dict(deployment.autoscale or {})
        window = settings.AUTOSCALE_WINDOW_S
        samples = [s for s in state.get("samples", []) if now - s[0] <= window]
        sample = inflight_now(deployment)
        if sample is not None:
            samples.append([now, round(sample, 3)])
        state["samples"] = samples
        # Not idle: requests came, or no ready replica reports yet (one is starting, perhaps for held
        # requests: going to zero now would strand them), or autoscaling just began.
        if sample or (sample is None and deployment.replicas > 0) or "busy_at" not in state:
            state["busy_at"] = now
        decision = _decide(deployment, state, now)
        if decision is not None:
            _apply(deployment, state, decision, now)
        Deployment.objects.filter(pk=deployment.pk).update(autoscale=state)
    return decision


def _decide(deployment: Deployment, state: dict, now: float) -> dict | None:
    current, low, high = deployment.replicas, deployment.min_replicas, deployment.max_replicas
    if not low <= current <= high:
        to = min(max(current, low), high)
        return {"from": current, "to": to, "reason": f"{current} replicas is outside the bounds {low}-{high}"}
    since = now - float(state.get("changed_at") or 0)
    if since < deployment.scale_cooldown_s:
        return None
    idle = now - float(state["busy_at"])
    if low == 0 and current > 0 and idle >= deployment.scale_to_zero_after_s:
        return {"from": current, "to": 0, "reason": f"no request for {idle:.0f} s (scale to zero after "
                f"{deployment.scale_to_zero_after_s} s idle)"}  # fmt: skip
    values = [v for _, v in state["samples"]]
    if not values:
        return None
    target, window = deployment.target_inflight_per_replica, settings.AUTOSCALE_WINDOW_S
    mean, peak = sum(values) / len(values), max(values)
    out = min(high, math.ceil(mean / target))
    if out > current:
        return {"from": current, "to": out, "reason": f"{mean:.1f} requests in flight on average over the last "
                f"{window} s, for a target of {target:g} per replica"}  # fmt: skip
    fits = max(low, 1, math.ceil(peak / target))  # to zero only when idle (above)
    if fits < current and since >= window:
        return {"from": current, "to": fits, "reason": f"at most {peak:.1f} requests in flight over the last "
                f"{window} s, for a target of {target:g} per replica"}  # fmt: skip
    return None


def _apply(deployment: Deployment, state: dict, decision: dict, now: float) -> None:
    decision["at"] = timezone.now().isoformat()
    state["changed_at"] = now
    state["decisions"] = [*state.get("decisions", []), decision][-DECISIONS_KEPT:]
    Deployment.objects.filter(pk=deployment.pk).update(replicas=decision["to"])
    log.info("deployment %s scaled %s -> %s: %s", deployment.name, decision["from"], decision["to"],
             decision["reason"])  # fmt: skip
    audit_record(team=deployment.team, actor=None, action="deployment.autoscale", target=deployment.name,
                 before={"replicas": decision["from"]}, after={"replicas": decision["to"]},
                 data={"reason": decision["reason"]})  # fmt: skip
    deployment.replicas = decision["to"]
    deployment_changed(deployment, reconcile=True)


def deployment_wake(name: str, *, now: float | None = None) -> bool:
    """A request is held for ``name``, scaled to zero: give it ``max(1, min_replicas)`` replicas with the
    reason; False (nothing changed) unless it autoscales, runs and has no replica wanted."""
    now = time.time() if now is None else now
    with transaction.atomic():
        deployment = _locked_autoscaled(name=name)
        if deployment is None or deployment.replicas > 0:
            return False
        state = dict(deployment.autoscale or {})
        state["busy_at"] = now
        to = max(1, deployment.min_replicas)
        decision = {"from": 0, "to": to, "reason": "a request arrived while scaled to zero"}
        _apply(deployment, state, decision, now)
        Deployment.objects.filter(pk=deployment.pk).update(autoscale=state)
    return True
