"""The database's view for placement: the ask for a deployment and every node as a Candidate."""

from __future__ import annotations

from collections import defaultdict

from inference import liveness
from inference.models import (
    Deployment,
    FleetGrant,
    GpuFootprint,
    ModelVersion,
    Node,
    Region,
    Replica,
    ReplicaState,
)
from inference.scheduler.memory import estimate_bytes, with_margin
from inference.scheduler.types import Ask, Candidate, Grant


def ask_for(deployment: Deployment, version: ModelVersion | None = None, *, granted: bool = True) -> Ask:
    """One more replica of ``deployment`` (of ``version``, by default the deployment's): its estimated
    GPU memory and any measured footprints, and (``granted``: an ask to place) what its team may use of
    the fleet and the regions' failover order."""
    version = version or deployment.model_version
    measured = GpuFootprint.objects.filter(
        model_version=version, device=deployment.device, max_batch_size=deployment.max_batch_size
    ).values_list("gpu_name", "bytes")
    return Ask(
        deployment=deployment,
        estimate=estimate_bytes(artifact_bytes=version.size_bytes, max_batch_size=deployment.max_batch_size),
        measured={name: with_margin(n) for name, n in measured},
        grant=grant_for(deployment) if granted else None,
        regions=failover_order() if granted else (),
    )


def failover_order() -> tuple[str, ...]:
    """Every region's name, lowest ``failover_order`` first (as ``services.regions.regions_known``)."""
    return tuple(Region.objects.order_by("failover_order", "name").values_list("name", flat=True))


def grant_for(deployment: Deployment) -> Grant:
    """The team's FleetGrant as placement reads it, with the team's current use when a cap needs it."""
    team = deployment.team
    row = FleetGrant.objects.filter(team=team).prefetch_related("pools").first()
    if row is None:
        return Grant(team=team.name)
    grant = Grant(team=team.name, pools=list(row.pools.all()), max_replicas=row.max_replicas,
                  max_gpus=row.max_gpus, max_gpu_memory_bytes=row.max_gpu_memory_bytes)  # fmt: skip
    if row.max_replicas is None and row.max_gpus is None and row.max_gpu_memory_bytes is None:
        return grant
    mine = Replica.objects.filter(deployment__team=team).select_related("deployment", "model_version", "node")
    asks: dict[tuple[int, int], Ask] = {}
    for replica in mine:
        grant.replicas += 1
        if replica.gpu_index is None:
            continue
        grant.gpus += 1
        key = (replica.deployment_id, replica.model_version_id)
        if key not in asks:
            asks[key] = ask_for(replica.deployment, replica.model_version, granted=False)
        grant.gpu_memory_bytes += asks[key].need_on(Candidate(node=replica.node))
    return grant


def _gpu_totals(node: Node) -> dict[int, tuple[int, int]]:
    """Each GPU's (total, reported free) memory from the node's inventory."""
    out: dict[int, tuple[int, int]] = {}
    for position, gpu in enumerate(node.inventory.get("gpus") or []):
        if not isinstance(gpu, dict):
            continue
        try:
            index = int(gpu.get("index", position))
            total = int(gpu.get("memory_total") or 0)
            free = int(gpu.get("memory_free", total) or 0)
        except (TypeError, ValueError):
            continue
        out[index] = (total, free)
    return out


def candidates(deployment: Deployment) -> list[Candidate]:
    """Every node with its replica counts and each GPU's free memory after the replicas assigned to it.

    A replica that is not ready yet has not taken its memory, so it is subtracted from the reported
    free memory; every replica is subtracted from the GPU's total, in case the report is stale.
    """
    # Another team's own nodes are not this deployment's to see, let alone to use.
    nodes = list(Node.objects.visible_to(deployment.team_id))
    fresh = liveness.inventories([n.name for n in nodes])
    for node in nodes:  # GPU free memory changes between the row's writes: take the last heartbeat's
        live = fresh.get(node.name) or {}
        if isinstance(live.get("gpus"), list):
            node.inventory = {**node.inventory, "gpus": live["gpus"]}
    replicas = Replica.objects.select_related("deployment", "model_version")
    by_node: dict[int, list[Replica]] = defaultdict(list)
    for replica in replicas:
        by_node[replica.node_id].append(replica)
    asks: dict[tuple[int, int], Ask] = {}
    out = []
    for node in nodes:
        mine = sum(1 for r in by_node[node.pk] if r.deployment_id == deployment.pk)
        candidate = Candidate(node=node, replicas=len(by_node[node.pk]), mine=mine)
        pending: dict[int, int] = defaultdict(int)
        assigned: dict[int, int] = defaultdict(int)
        for r in by_node[node.pk]:
            if r.gpu_index is None:
                continue
            key = (r.deployment_id, r.model_version_id)
            if key not in asks:
                asks[key] = ask_for(r.deployment, r.model_version, granted=False)
            need = asks[key].need_on(candidate)
            assigned[r.gpu_index] += need
            if r.state != ReplicaState.READY:
                pending[r.gpu_index] += need
        candidate.gpu_free = {
            index: min(free - pending[index], total - assigned[index])
            for index, (total, free) in _gpu_totals(node).items()
        }
        out.append(candidate)
    return out
