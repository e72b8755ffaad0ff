"""Deployments: people change desired state here; `deployment_reconcile` converges replicas to it."""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any, cast

from django.db import transaction
from django.utils import timezone

from accounts.models import Team
from accounts.permissions import permission_require
from accounts.services import audit_record
from core.errors import Conflict, NotFound, ValidationFailed
from inference import scheduler
from inference.models import (
    Deployment,
    DesiredState,
    Device,
    ModelVersion,
    NodeMode,
    NodeStatus,
    Replica,
    ReplicaState,
)
from inference.scheduler.cluster import ask_for, candidates
from inference.services.deployment_changes import deployment_changed
from inference.services.node_join import labels_validate
from inference.services.redis_users import redis_runner_user_drop, redis_runner_user_ensure
from inference.services.regions import region_default, region_require
from inference.services.rollouts import (
    RUNTIME_FIELDS,
    canary_abort,
    canary_digest,
    canary_wanted,
    rollout_baking,
    rollout_begin,
    rollout_rollback,
    rollout_spec,
    rollout_step,
    spec_digest,
)

_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9-]{0,62}$")


@dataclass(frozen=True)
class DeploymentSpec:
    """A deployment's settings as people choose them; `validate` is the one check for create and update."""

    name: str
    model_version_id: int
    replicas: int = 1
    region: str = ""  # a Region's name; "" (a new deployment): the first region in failover order
    device: str = Device.CPU
    max_batch_size: int = 8
    max_queue_delay_ms: int = 5
    node_selector: dict = field(default_factory=dict)

    @classmethod
    def of(cls, deployment: Deployment) -> DeploymentSpec:
        """The spec a stored deployment runs with, for an update to change and check as a whole."""
        return cls(
            name=deployment.name,
            model_version_id=deployment.model_version_id,
            replicas=deployment.replicas,
            region=deployment.region,
            device=deployment.device,
            max_batch_size=deployment.max_batch_size,
            max_queue_delay_ms=deployment.max_queue_delay_ms,
            node_selector=dict(deployment.node_selector or {}),
        )

    def validate(self) -> None:
        """Refuse values no runner should get (ValidationFailed naming the field)."""
        if not _NAME_RE.match(self.name or ""):
            raise ValidationFailed("deployment name must be lowercase letters, digits and dashes (max 63)")
        if not 0 <= self.replicas <= 32:
            raise ValidationFailed("replicas must be between 0 and 32")
        region_require(self.region)  # "region must be one of hk, us, ..." (the regions table)
        if self.device not in Device.values:
            raise ValidationFailed(f"device must be one of {', '.join(Device.values)}")
        if not 1 <= self.max_batch_size <= 256:
            raise ValidationFailed("max_batch_size must be between 1 and 256")
        if not 0 <= self.max_queue_delay_ms <= 1000:
            raise ValidationFailed("max_queue_delay_ms must be between 0 and 1000")
        labels_validate(self.node_selector, field="node_selector")  # one label grammar for nodes and this


def _servable_version(*, team: Team, model_version_id: int) -> ModelVersion:
    """One of the team's versions that a runner can serve (ONNX); 404 for other teams' versions."""
    version = ModelVersion.objects.filter(pk=model_version_id, model__team=team).first()
    if version is None:
        raise NotFound("model version not found")
    if version.format != "onnx":
        raise ValidationFailed(
            f"{version} is {version.format}: runners serve ONNX, so export it to ONNX first"
        )
    return version


def _check_same_model(deployment: Deployment, version: ModelVersion) -> None:
    """A deployment moves only between versions of its own model: clients keep calling it by name with
    the same task and inputs, so swapping in another model (a chat model for an image classifier) would
    break every caller while the deployment still reported ready."""
    current = deployment.model_version
    if version.model_id != current.model_id:
        raise ValidationFailed(
            f"{deployment.name!r} serves model {current.model.name!r}: it can only move to another "
            f"version of that model, not to {version}; create a new deployment for it"
        )


def _audit_state(deployment: Deployment) -> dict:
    return {
        "replicas": deployment.replicas,
        "state": deployment.desired_state,
        "version": str(deployment.model_version),
        **{k: getattr(deployment, k) for k in RUNTIME_FIELDS},
    }


def deployment_create(*, team: Team, actor, spec: DeploymentSpec) -> Deployment:
    """Create a deployment of one of the team's versions; placement happens in the worker after commit."""
    permission_require(team=team, user=actor, action="deployment.create")
    if not spec.region:
        spec = replace(spec, region=region_default())
    spec.validate()
    version = _servable_version(team=team, model_version_id=spec.model_version_id)
    with transaction.atomic():
        region_require(spec.region, lock=True)  # not removed while this deployment is given it
        if Deployment.objects.select_for_update().filter(name=spec.name).exists():
            # Names are global (clients call `/v1/` by name), so a taken name cannot be hidden; the
            # message is the same whichever team holds it and says nothing about that team.
            raise Conflict(f"the deployment name {spec.name!r} is not available; choose another")
        deployment = Deployment.objects.create(
            team=team,
            name=spec.name,
            model_version=version,
            replicas=spec.replicas,
            region=spec.region,
            device=spec.device,
            max_batch_size=spec.max_batch_size,
            max_queue_delay_ms=spec.max_queue_delay_ms,
            node_selector=spec.node_selector,
            created_by=actor,
        )
        audit_record(
            team=team,
            actor=actor,
            action="deployment.create",
            target=spec.name,
            data={
                "version": str(version),
                "replicas": spec.replicas,
                "region": spec.region,
                "device": spec.device,
                "node_selector": spec.node_selector,
            },  # fmt: skip
        )
        deployment_changed(deployment, reconcile=True)
        transaction.on_commit(partial(redis_runner_user_ensure, deployment.name))
    return deployment


def deployment_update(
    *,
    team: Team,
    actor,
    deployment: Deployment,
    replicas: int | None = None,
    desired_state: str | None = None,
    model_version_id: int | None = None,
    max_batch_size: int | None = None,
    max_queue_delay_ms: int | None = None,
    device: str | None = None,
    region: str | None = None,
    node_selector: dict | None = None,
) -> Deployment:
    """Scale, pause, resume, move to another version or change how replicas run (device, batching,
    region, node selector); the reconciler rolls replicas over one at a time.

    The changed spec goes through the same `DeploymentSpec.validate` as a new one, so both refuse
    the same values with the same message.
    """
    permission_require(team=team, user=actor, action="deployment.update")
    given = {"replicas": replicas, "model_version_id": model_version_id, "max_batch_size": max_batch_size,
             "max_queue_delay_ms": max_queue_delay_ms, "device": device, "region": region,
             "node_selector": node_selector}  # fmt: skip
    changes = {k: v for k, v in given.items() if v is not None}
    replace(DeploymentSpec.of(deployment), **cast(Any, changes)).validate()
    version = None
    if model_version_id is not None:
        version = _servable_version(team=team, model_version_id=model_version_id)
        _check_same_model(deployment, version)
    if desired_state is not None and desired_state not in DesiredState.values:
        raise ValidationFailed(f"state must be one of {', '.join(DesiredState.values)}")
    with transaction.atomic():
        if region is not None:
            region_require(region, lock=True)
        deployment = Deployment.objects.select_for_update().get(pk=deployment.pk)
        before = _audit_state(deployment)
        _apply_changes(deployment, changes, desired_state=desired_state, version=version)
        audit_record(
            team=team,
            actor=actor,
            action="deployment.update",
            target=deployment.name,
            before=before,
            after=_audit_state(deployment),
        )
        deployment_changed(deployment, reconcile=True)
    return deployment


def _apply_changes(
    deployment: Deployment, changes: dict, *, desired_state: str | None, version: ModelVersion | None
) -> None:
    """Set and save the changes on the locked row; a change of what replicas run starts a rollout
    (services.rollouts), refused while a canary runs (its replicas run the same settings)."""
    ran, ran_digest = rollout_spec(deployment), spec_digest(deployment)
    for key, value in changes.items():
        if key != "model_version_id":
            setattr(deployment, key, value)
    if desired_state is not None:
        deployment.desired_state = desired_state
    if version is not None:
        deployment.model_version = version
    if spec_digest(deployment) != ran_digest:
        if deployment.canary_version_id is not None:
            raise Conflict(
                f"{deployment.name!r} runs a canary of {deployment.canary_version}: promote or abort it "
                "before changing its version or settings"
            )
        rollout_begin(deployment, before=ran)
    deployment.save()


def deployment_delete(*, team: Team, actor, deployment: Deployment) -> None:
    permission_require(team=team, user=actor, action="deployment.delete")
    with transaction.atomic():
        name = deployment.name
        deployment.delete()  # replicas go with it; agents stop runners they no longer see
        audit_record(team=team, actor=actor, action="deployment.delete", target=name)
        deployment_changed(deployment)  # edges drop its route now, not at the next rewrite
        transaction.on_commit(partial(redis_runner_user_drop, name))


def deployment_reconcile(deployment_id: int) -> dict:
    """Converge replicas to the desired state. Idempotent; runs after every change and every 15 s.

    Dead replicas (failed, or on a node that is not ready) go at once and are replaced. A replica
    that must move (started with other settings, see `spec_digest`, or on a draining node) keeps
    serving until a replacement is ready: on a settings change one new replica starts at a time and
    one old one retires per new one ready; replacements for a draining node start all at once. A
    rollout whose new replicas fail is rolled back first (`services.rollouts`), a failing canary
    aborted; a canary's replicas are kept apart (`_converge_canary`).
    """
    with transaction.atomic():
        deployment = (
            Deployment.objects.select_for_update()
            .select_related("model_version")
            .filter(pk=deployment_id)
            .first()
        )
        if deployment is None:
            return {"deleted": True}
        want = deployment.replicas if deployment.desired_state == DesiredState.RUNNING else 0
        replicas = list(deployment.replica_set.select_related("node"))
        rolled_back = _judge_rollout(deployment, replicas, want)
        track = canary_digest(deployment)
        canary = [r for r in replicas if track is not None and r.spec == track]
        result = _converge(deployment, [r for r in replicas if r not in canary], want)
        result["canary_placed"] = _converge_canary(deployment, canary, canary_wanted(deployment, want))
        if result["removed"] and track is None and not rolled_back:
            # The last old replicas may have retired in this pass: the rollout ends now, not at the
            # next periodic pass (15 s later). Deleted rows have no primary key any more.
            rollout_step(deployment, [r for r in replicas if r.pk is not None], spec_digest(deployment), want)
        if result["removed"] or result["placed"] or result["canary_placed"]:
            deployment_changed(deployment)  # pages and edges see it now, not at the next rewrite
    return result | {"rolled_back": rolled_back}


def _judge_rollout(deployment: Deployment, replicas: list[Replica], want: int) -> bool:
    """Follow the rollout or canary in progress; roll back (abort a canary) when it failed. True when
    this pass rolled back."""
    track = canary_digest(deployment)
    if track is not None:
        mine = [r for r in replicas if r.spec == track]
        reason = rollout_step(deployment, mine, track, canary_wanted(deployment, want))
        if reason:
            canary_abort(deployment, reason)
        return False
    reason = rollout_step(deployment, replicas, spec_digest(deployment), want)
    return reason is not None and rollout_rollback(deployment, reason)


def _converge(deployment: Deployment, replicas: list[Replica], want: int) -> dict:
    """The deployment's own replicas (a canary's aside): remove the dead and the unneeded, roll over
    the outdated one at a time, place the missing."""
    digest = spec_digest(deployment)
    dead = [r for r in replicas if r.node.status != NodeStatus.ONLINE or r.state == ReplicaState.FAILED]
    alive = [r for r in replicas if r not in dead]
    _adopt_unversioned(alive, deployment, digest)
    outdated = [r for r in alive if r.spec != digest]
    moving = outdated + [r for r in alive if r.spec == digest and r.node.mode == NodeMode.DRAINING]
    if not outdated:  # not during a rollout: replicas that failed over go home once home can take them
        moving += _coming_home(deployment, [r for r in alive if r not in moving], want)
    # Keep ready replicas first, then those in the preferred region; extras beyond `want` go.
    stay = sorted((r for r in alive if r not in moving),
                  key=lambda r: (r.state != ReplicaState.READY, r.node.region != deployment.region, r.pk))  # fmt: skip
    keep, extra = stay[:want], stay[want:]
    ready = sum(1 for r in keep if r.state == ReplicaState.READY)
    baking = bool(outdated) and rollout_baking(deployment)  # the first new one proves itself first
    # Old replicas still needed for capacity keep serving (ready ones first); the rest retire.
    moving.sort(key=lambda r: (r.state != ReplicaState.READY, r.pk))
    retire = moving[max(0, want - (0 if baking else ready)) :]
    for r in dead + extra + retire:
        r.delete()
    missing = want - len(keep)
    if outdated:  # a settings change rolls over: one new replica starting at a time
        missing = min(missing, max(0, 1 - (len(keep) - ready)), 0 if baking and ready else missing)
    placed = _place_missing(deployment, keep, missing, digest)
    return {
        "kept": len(keep),
        "placed": placed,
        "removed": len(dead + extra + retire),
        "outdated_serving": len(moving) - len(retire),
    }


def _coming_home(deployment: Deployment, current: list[Replica], want: int) -> list[Replica]:
    """Replicas running outside the preferred region (they failed over, or it had no room) that should
    move back now that it can take them: each is replaced like one on a draining node (a new replica
    placed at home first, the one away retired once enough are ready), so none stops serving early.

    The number is stable from pass to pass: with ``home`` replicas in the region already and room for
    ``room`` more, ``min(want, home + room)`` should run at home, so that many minus those already there
    leave; the ones replacing them count as home on the next pass, and nothing flips back. Gently: only
    while every replica away is ready (a deployment still recovering from the failover is left alone),
    and one new replica starting at home at a time (each loads its model on a host that may be serving).
    """
    away = [r for r in current if r.node.region != deployment.region]
    if want <= 0 or not away or any(r.state != ReplicaState.READY for r in away):
        return []
    home = len(current) - len(away)
    home_ready = sum(
        1 for r in current if r.node.region == deployment.region and r.state == ReplicaState.READY
    )
    room = _room_at_home(deployment, want - home) if home < want else 0
    leaving = min(len(away) - (want - min(want, home + room)), home_ready + 1)
    away.sort(key=lambda r: (r.state == ReplicaState.READY, -r.pk))  # not ready ones first, then the newest
    return away[: max(0, min(len(away), leaving))]


def _room_at_home(deployment: Deployment, limit: int) -> int:
    """How many more replicas (at most ``limit``) the nodes of the preferred region can take now."""
    ask = ask_for(deployment)
    cands = [c for c in candidates(deployment) if c.node.region == deployment.region]
    room = 0
    while room < limit:
        verdict = scheduler.place(ask, cands)
        if verdict.choice is None:
            break
        scheduler.take(ask, verdict.choice)
        room += 1
    return room


def _converge_canary(deployment: Deployment, replicas: list[Replica], count: int) -> int:
    """Keep ``count`` live canary replicas (ready ones first); the number placed."""
    dead = [r for r in replicas if r.node.status != NodeStatus.ONLINE or r.state == ReplicaState.FAILED]
    alive = sorted(
        (r for r in replicas if r not in dead), key=lambda r: (r.state != ReplicaState.READY, r.pk)
    )
    for r in dead + alive[count:]:
        r.delete()
    missing = count - len(alive[:count])
    version = deployment.canary_version
    if missing <= 0 or version is None:
        return 0
    ask, cands = ask_for(deployment, version), candidates(deployment)
    placed = 0
    for _ in range(missing):
        verdict = scheduler.place(ask, cands)
        if verdict.choice is None:
            break
        Replica.objects.create(deployment=deployment, node=verdict.choice.candidate.node, model_version=version,
                               gpu_index=verdict.choice.gpu_index, spec=spec_digest(deployment, version.pk))  # fmt: skip
        scheduler.take(ask, verdict.choice)
        placed += 1
    return placed


def _adopt_unversioned(replicas: list[Replica], deployment: Deployment, digest: str) -> None:
    """Replicas placed before digests existed run the current settings if they run the current
    version: adopt them rather than restart every runner after an upgrade."""
    for r in replicas:
        if not r.spec and r.model_version_id == deployment.model_version_id:
            r.spec = digest
            Replica.objects.filter(pk=r.pk).update(spec=digest)


def _place_missing(deployment: Deployment, keep: list[Replica], missing: int, digest: str) -> int:
    """Place up to `missing` replicas and record where the deployment runs and why (placement)."""
    cands: list[scheduler.Candidate] = []
    reasons: list[str] = []
    placed: list[str] = []
    ask = ask_for(deployment)
    away = any(r.node.region != deployment.region for r in keep)
    if missing > 0 or away:
        cands = candidates(deployment)
    for _ in range(max(0, missing)):
        verdict = scheduler.place(ask, cands)
        if verdict.choice is None:
            reasons = verdict.reasons
            break
        node = verdict.choice.candidate.node
        Replica.objects.create(deployment=deployment, node=node, model_version_id=deployment.model_version_id,
                               gpu_index=verdict.choice.gpu_index, spec=digest)  # fmt: skip
        scheduler.take(ask, verdict.choice)
        placed.append(node.region)
    regions = [r.node.region for r in keep] + placed
    record = placement_record(
        deployment, ask, cands, regions, unplaced=missing - len(placed), reasons=reasons
    )
    if {k: v for k, v in record.items() if k != "updated_at"} != {
        k: v for k, v in (deployment.placement or {}).items() if k != "updated_at"
    }:
        Deployment.objects.filter(pk=deployment.pk).update(placement=record)
        deployment.placement = record
    return len(placed)


def placement_record(
    deployment: Deployment,
    ask: scheduler.Ask,
    cands: list[scheduler.Candidate],
    regions: list[str],
    *,
    unplaced: int,
    reasons: list[str],
) -> dict:
    """Where the deployment's replicas run, how many could not be placed and why, per node; and, when
    some run outside the preferred region, why that region could not take them (honest placement)."""
    by_region = {region: regions.count(region) for region in sorted(set(regions))}
    note = ""
    away = sum(n for region, n in by_region.items() if region != deployment.region)
    region_reasons: list[str] = []
    if away:
        mine = [c for c in cands if c.node.region == deployment.region]
        region_reasons = [f"{c.node.name}: {why}" for c in mine if (why := scheduler.refusal(ask, c))]
        where = ", ".join(
            f"{n} in {region}" for region, n in by_region.items() if region != deployment.region
        )
        why = "no node there has joined" if not mine else "no node there can take it"
        note = f"preferred region {deployment.region} has no usable node ({why}): {where}"
    if unplaced > 0 and not note:
        note = f"{unplaced} replica(s) could not be placed"
    return {
        "preferred_region": deployment.region,
        "regions": by_region,
        "in_preferred_region": away == 0,
        "unplaced": max(0, unplaced),
        "reasons": reasons[:50],
        "region_reasons": region_reasons[:50],
        "note": note,
        "updated_at": timezone.now().isoformat(),
    }
