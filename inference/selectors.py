"""Reads for the registry, deployments and nodes, always scoped to a team."""

from __future__ import annotations

from django.db.models import Count, Prefetch, Q, QuerySet

from accounts.models import Team
from core.errors import NotFound
from inference.models import Deployment, Job, ModelVersion, Node, Region, RegisteredModel, Replica


def models_for_team(*, team: Team) -> QuerySet[RegisteredModel]:
    versions = ModelVersion.objects.select_related("model").prefetch_related("artifacts").order_by("-number")
    return RegisteredModel.objects.filter(team=team).prefetch_related(Prefetch("versions", queryset=versions))


def model_get(*, team: Team, name: str) -> RegisteredModel:
    model = models_for_team(team=team).filter(name=name).first()
    if model is None:
        raise NotFound(f"model {name!r} not found")
    return model


def version_get(*, team: Team, version_id: int) -> ModelVersion:
    version = ModelVersion.objects.select_related("model").filter(pk=version_id, model__team=team).first()
    if version is None:
        raise NotFound("model version not found")
    return version


def versions_for_team(*, team: Team) -> QuerySet[ModelVersion]:
    return (
        ModelVersion.objects.select_related("model")
        .filter(model__team=team)
        .order_by("model__name", "-number")
    )


# What pages and the API show of a deployment's replicas and their nodes and versions: with 600
# replicas, loading whole rows (the node's inventory, the version's labels and settings, all JSON) for
# each replica cost most of a page's 150-290 ms of CPU. These columns, and each version read once
# (a prefetch: the replicas of a deployment share one or two), keep it to two queries and a few ms.
_REPLICA_COLUMNS = (
    "id", "deployment_id", "node_id", "model_version_id", "state", "url", "error", "gpu_index", "spec",
    "created_at", "updated_at", "node__id", "node__name", "node__region", "node__status", "node__mode",
)  # fmt: skip
_VERSION_COLUMNS = ("id", "number", "model_id", "model__id", "model__name", "model__task")


def deployments_for_team(*, team: Team) -> QuerySet[Deployment]:
    replicas = Replica.objects.select_related("node").only(*_REPLICA_COLUMNS).order_by("pk")
    versions = ModelVersion.objects.select_related("model").only(*_VERSION_COLUMNS)
    return (
        Deployment.objects.filter(team=team)
        .select_related("model_version__model", "canary_version__model")
        .prefetch_related(
            Prefetch("replica_set", queryset=replicas),
            Prefetch("replica_set__model_version", queryset=versions),
        )
    )


# The order in which a deployment's replicas are summed up by state on list pages.
_STATE_ORDER = ("ready", "starting", "pending", "failed")


def deployments_with_state_counts(*, team: Team) -> list[Deployment]:
    """The team's deployments, each with ``state_counts``: [(state, replicas in it)], ready first.

    What list pages and the dashboard show: a count per state, not one row per replica. Two queries
    whatever the fleet's size (with 600 replicas, loading each with its node and version cost the
    dashboard and the deployment list most of their time; ``deployments_for_team`` still does that for
    pages and API answers that show each replica)."""
    deployments = list(
        Deployment.objects.filter(team=team)
        .select_related("model_version__model", "canary_version__model")
        .order_by("name")
    )
    counts: dict[int, dict[str, int]] = {}
    rows = (
        Replica.objects.filter(deployment__team=team)
        .values_list("deployment_id", "state")
        .annotate(n=Count("id"))
        .order_by()
    )
    for deployment_id, state, n in rows:
        counts.setdefault(deployment_id, {})[state] = n
    rank = {state: index for index, state in enumerate(_STATE_ORDER)}
    for deployment in deployments:
        deployment.elsewhere = runs_elsewhere(deployment)  # type: ignore[attr-defined]
        found = counts.get(deployment.pk, {})
        deployment.state_counts = sorted(found.items(), key=lambda item: (rank.get(item[0], 99), item[0]))  # type: ignore[attr-defined]
    return deployments


def deployment_get(*, team: Team, name: str) -> Deployment:
    deployment = deployments_for_team(team=team).filter(name=name).first()
    if deployment is None:
        raise NotFound(f"deployment {name!r} not found")
    return deployment


def deployment_status(deployment: Deployment) -> str:
    """One word for people: paused, ready, degraded (some replicas ready), starting, failed, unplaced,
    or "scaled to zero" (autoscaling down to no replica; the next request wakes it)."""
    if deployment.desired_state == "paused":
        return "paused"
    if deployment.replicas == 0 and deployment.max_replicas:
        return "scaled to zero"
    counted = getattr(deployment, "state_counts", None)  # deployments_with_state_counts: no replica read
    if counted is None:
        states = [r.state for r in deployment.replica_set.all()]
        counted = [(state, states.count(state)) for state in set(states)]
    by_state = dict(counted)
    ready = by_state.get("ready", 0)
    if deployment.replicas and ready >= deployment.replicas:
        return "ready"
    if ready:
        return "degraded"
    if by_state.get("failed"):
        return "failed"
    return "starting" if by_state else "unplaced"


def nodes_all() -> QuerySet[Node]:
    return Node.objects.all()


def nodes_with_load(*, team: Team | None = None) -> QuerySet[Node]:
    """The shared fleet and ``team``'s own nodes (every node when None) with ``replica_count``: how many
    of a node's slots are taken, by any team. Another team's own nodes are not listed."""
    qs: QuerySet[Node] = Node.objects.all() if team is None else Node.objects.visible_to(team.pk)
    return qs.select_related("team").annotate(replica_count=Count("replicas")).order_by("region", "name")


def node_replicas_for_team(*, node: Node, team: Team) -> QuerySet[Replica]:
    """The replicas on ``node`` that belong to ``team``; other teams' replicas are not theirs to see."""
    return (
        Replica.objects.filter(node=node, deployment__team=team)
        .select_related("deployment", "model_version__model")
        .order_by("deployment__name", "pk")
    )


_GIB = 2**30


HOST_ROWS = ("Host", "Runtimes", "Edge")  # where the machine is and what it runs: administrators only


RUNNER_ISOLATION = {  # the agent's inventory["runner_isolation"] (inference.agent.isolation)
    "uid-per-replica": "one OS user per replica",
    "shared-uid": "none: every replica's runner runs as the agent's OS user",
}


def node_inventory_rows(node: Node, *, full: bool = True) -> list[tuple[str, str]]:
    """The inventory a node's agent reported, as (what, value) rows for people. Without ``full`` (a
    member who is no install administrator, review L-A) only capacity: cores, memory, disk and GPUs,
    never the host name, its address, the edge's port or the runtimes' versions."""
    rows = _inventory_rows(node)
    return rows if full else [row for row in rows if row[0] not in HOST_ROWS]


def _inventory_rows(node: Node) -> list[tuple[str, str]]:
    inv = node.inventory or {}
    rows: list[tuple[str, str]] = []

    def gib(value) -> str:
        return f"{value / _GIB:.1f} GiB" if isinstance(value, int | float) else "–"

    for key, label in (("hostname", "Host"), ("cpus", "CPU cores"), ("providers", "Runtimes")):
        value = inv.get(key)
        if value:
            rows.append((label, ", ".join(map(str, value)) if isinstance(value, list) else str(value)))
    if "memory_bytes" in inv:
        rows.append(
            ("Memory", f"{gib(inv.get('memory_available_bytes'))} free of {gib(inv['memory_bytes'])}")
        )
    if "disk_free_bytes" in inv:
        rows.append(("Disk free", gib(inv["disk_free_bytes"])))
    edge = inv.get("edge")
    if isinstance(edge, dict):  # an edge-flagged node's agent runs its region's edge
        where = f"{inv.get('advertise_host') or inv.get('hostname') or 'the node'}:{edge.get('port') or '?'}"
        state = "serving" if edge.get("ready") is True else "not ready"
        why = f" ({str(edge['error'])[:200]})" if edge.get("error") and edge.get("ready") is not True else ""
        rows.append(("Edge", f"{state} on {where}{why}"))
    isolation = inv.get("runner_isolation")  # review M-D: whether teams' runners share one OS user here
    if isolation in RUNNER_ISOLATION:
        rows.append(("Runner isolation", RUNNER_ISOLATION[isolation]))
    for i, gpu in enumerate(inv.get("gpus") or []):
        if isinstance(gpu, dict):
            rows.append(
                (f"GPU {gpu.get('index', i)}", f"{gpu.get('name', 'GPU')}, {gib(gpu.get('memory_total'))}")
            )
    return rows


def deployments_needing_attention(
    *, team: Team, deployments: list[Deployment] | None = None
) -> list[tuple[Deployment, str]]:
    """The team's deployments that are not fully ready (degraded, failed, starting, unplaced), with status;
    ``deployments``: the team's, already read with ``deployments_for_team`` (not read again)."""
    out = []
    for deployment in deployments_for_team(team=team) if deployments is None else deployments:
        status = deployment_status(deployment)
        # Ready but outside its region needs attention too: the card says where and why (honest placement).
        if status not in ("ready", "paused") or (status == "ready" and runs_elsewhere(deployment)):
            out.append((deployment, status))
    return out


def runs_elsewhere(deployment: Deployment) -> str:
    """The regions, other than the preferred one, where the reconciler last placed replicas ("HK"), from
    ``Deployment.placement`` (no query); "" when every replica runs in the preferred region."""
    placement = deployment.placement if isinstance(deployment.placement, dict) else {}
    regions = placement.get("regions")
    if not isinstance(regions, dict):
        return ""
    away = sorted(r for r, n in regions.items() if r != deployment.region and isinstance(n, int) and n > 0)
    return ", ".join(r.upper() for r in away)


def jobs_recent(*, team: Team, limit: int = 8) -> QuerySet[Job]:
    return jobs_for_team(team=team).order_by("-created_at")[:limit]


def jobs_list(*, team: Team, status: str = "") -> QuerySet[Job]:
    """The team's jobs across models, newest first; ``status`` filters (``active``: queued or running)."""
    jobs = jobs_for_team(team=team).order_by("-created_at")
    if status == "active":
        return jobs.filter(Q(status="queued") | Q(status="running"))
    return jobs.filter(status=status) if status else jobs


def jobs_for_team(*, team: Team, version_id: int | None = None) -> QuerySet[Job]:
    qs = Job.objects.filter(team=team).select_related("source__model", "output__model", "created_by")
    return qs.filter(source_id=version_id) if version_id else qs


def job_get(*, team: Team, job_id: int) -> Job:
    job = jobs_for_team(team=team).filter(pk=job_id).first()
    if job is None:
        raise NotFound("job not found")
    return job


def regions_known() -> list[Region]:
    """Every region, in failover order (then by name): the one list pages, the API and checks read."""
    return list(Region.objects.order_by("failover_order", "name"))


def region_names() -> list[str]:
    return [r.name for r in regions_known()]


def region_choices() -> list[tuple[str, str]]:
    """``(name, display name)`` pairs in failover order, for forms."""
    return [(r.name, r.display_name) for r in regions_known()]
