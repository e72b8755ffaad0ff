"""Deployments: people change desired state here; `deployment_reconcile` converges replicas to it."""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from django.db import transaction
from django.db.models import Count

from accounts.models import Team
from accounts.permissions import permission_require
from accounts.services import audit_record
from core.errors import Conflict, NotFound, ValidationFailed
from inference import queue, scheduler
from inference.models import (
    Deployment,
    DesiredState,
    Device,
    ModelVersion,
    Node,
    Region,
    Replica,
    ReplicaState,
)

_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9-]{0,62}$")


@dataclass(frozen=True)
class DeploymentSpec:
    """A deployment's settings as people choose them; `validate` is the one check for create and update."""

    name: str
    model_version_id: int
    replicas: int = 1
    region: str = Region.HK
    device: str = Device.CPU
    max_batch_size: int = 8
    max_queue_delay_ms: int = 5

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
        )

    def validate(self) -> None:
        """Refuse values no runner should get (ValidationFailed naming the field)."""
        if not _NAME_RE.match(self.name or ""):
            raise ValidationFailed("deployment name must be lowercase letters, digits and dashes (max 63)")
        if not 0 <= self.replicas <= 32:
            raise ValidationFailed("replicas must be between 0 and 32")
        if self.region not in Region.values:
            raise ValidationFailed(f"region must be one of {', '.join(Region.values)}")
        if self.device not in Device.values:
            raise ValidationFailed(f"device must be one of {', '.join(Device.values)}")
        if not 1 <= self.max_batch_size <= 256:
            raise ValidationFailed("max_batch_size must be between 1 and 256")
        if not 0 <= self.max_queue_delay_ms <= 1000:
            raise ValidationFailed("max_queue_delay_ms must be between 0 and 1000")


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
    }


def _enqueue_reconcile(deployment_id: int) -> None:
    queue.deployment_reconcile_later(deployment_id)


def deployment_create(*, team: Team, actor, spec: DeploymentSpec) -> Deployment:
    """Create a deployment of one of the team's versions; placement happens in the worker after commit."""
    permission_require(team=team, user=actor, action="deployment.create")
    spec.validate()
    version = _servable_version(team=team, model_version_id=spec.model_version_id)
    with transaction.atomic():
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
            created_by=actor,
        )
        audit_record(
            team=team,
            actor=actor,
            action="deployment.create",
            target=spec.name,
            data={"version": str(version), "replicas": spec.replicas, "region": spec.region},
        )
        _enqueue_reconcile(deployment.pk)
    return deployment


def deployment_update(
    *,
    team: Team,
    actor,
    deployment: Deployment,
    replicas: int | None = None,
    desired_state: str | None = None,
    model_version_id: int | None = None,
) -> Deployment:
    """Scale, pause, resume or move to another version; the reconciler rolls replicas over.

    The changed spec goes through the same `DeploymentSpec.validate` as a new one, so both refuse
    the same values with the same message.
    """
    permission_require(team=team, user=actor, action="deployment.update")
    current = DeploymentSpec.of(deployment)
    replace(
        current,
        replicas=current.replicas if replicas is None else replicas,
        model_version_id=current.model_version_id if model_version_id is None else model_version_id,
    ).validate()
    version = None
    if model_version_id is not None:
        version = _servable_version(team=team, model_version_id=model_version_id)
        _check_same_model(deployment, version)
    if desired_state is not None and desired_state not in DesiredState.values:
        raise ValidationFailed(f"state must be one of {', '.join(DesiredState.values)}")
    with transaction.atomic():
        deployment = Deployment.objects.select_for_update().get(pk=deployment.pk)
        before = _audit_state(deployment)
        if replicas is not None:
            deployment.replicas = replicas
        if desired_state is not None:
            deployment.desired_state = desired_state
        if version is not None:
            deployment.model_version = version
        deployment.save()
        audit_record(
            team=team,
            actor=actor,
            action="deployment.update",
            target=deployment.name,
            before=before,
            after=_audit_state(deployment),
        )
        _enqueue_reconcile(deployment.pk)
    return deployment


def deployment_delete(*, team: Team, actor, deployment: Deployment) -> None:
    permission_require(team=team, user=actor, action="deployment.delete")
    with transaction.atomic():
        name = deployment.name
        deployment.delete()  # replicas go with it; agents stop runners they no longer see
        audit_record(team=team, actor=actor, action="deployment.delete", target=name)


def deployment_reconcile(deployment_id: int) -> dict:
    """Converge replicas to the desired state. Idempotent; runs after every change and every 15 s.

    Dead replicas (failed, or on an offline node) go at once. Replicas of an older version keep serving
    until as many replicas of the current version are ready as wanted (a rolling update with surge),
    so an update never leaves the deployment without a ready replica.
    """
    with transaction.atomic():
        deployment = Deployment.objects.select_for_update().filter(pk=deployment_id).first()
        if deployment is None:
            return {"deleted": True}
        want = deployment.replicas if deployment.desired_state == DesiredState.RUNNING else 0
        replicas = list(deployment.replica_set.select_related("node"))
        dead = [r for r in replicas if r.node.status == "offline" or r.state == ReplicaState.FAILED]
        alive = [r for r in replicas if r not in dead]
        current = [r for r in alive if r.model_version_id == deployment.model_version_id]
        outdated = [r for r in alive if r.model_version_id != deployment.model_version_id]
        ready = sum(1 for r in current[:want] if r.state == ReplicaState.READY)
        retire = outdated if ready >= want else []
        for r in dead + current[want:] + retire:
            r.delete()
        placed = _place_missing(deployment, current[:want], want)
    return {
        "kept": len(current[:want]),
        "placed": placed,
        "removed": len(dead + current[want:] + retire),
        "outdated_serving": len(outdated) - len(retire),
    }


def _place_missing(deployment: Deployment, keep: list[Replica], want: int) -> int:
    nodes = list(Node.objects.all())
    load = dict(Replica.objects.values_list("node_id").annotate(n=Count("id")))
    used = {r.node_id for r in keep}
    placed = 0
    for _ in range(want - len(keep)):
        node = scheduler.place(deployment, nodes, load, used)
        if node is None:
            break
        Replica.objects.create(deployment=deployment, node=node, model_version_id=deployment.model_version_id)
        load[node.pk] = load.get(node.pk, 0) + 1
        used.add(node.pk)
        placed += 1
    return placed
