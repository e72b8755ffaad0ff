from datetime import datetime
from typing import Annotated

from ninja import Field, Schema

from core.schemas import StrictIn
from inference.jobs.registry import KindNameSchema, KindOptionsSchema
from inference.reports import public_result
from inference.selectors import deployment_status
from inference.services.canary import canary_figures


class ArtifactOut(Schema):
    role: str
    filename: str
    sha256: str
    size_bytes: int


class ModelVersionOut(Schema):
    id: int
    model: str
    number: int
    label: str
    task: str
    format: str
    precision: str
    sha256: str
    size_bytes: int
    inputs: list
    outputs: list
    labels_count: int
    preprocessing: dict
    lineage: dict
    report: dict
    parent_id: int | None
    created_at: datetime
    artifacts: list[ArtifactOut]

    @staticmethod
    def resolve_model(obj):
        return obj.model.name

    @staticmethod
    def resolve_task(obj):
        return obj.model.task

    @staticmethod
    def resolve_labels_count(obj):
        return len(obj.labels)

    @staticmethod
    def resolve_artifacts(obj):
        return list(obj.artifacts.all())

    @staticmethod
    def resolve_report(obj):
        return public_result(obj.report or {})


class ModelOut(Schema):
    id: int
    name: str
    task: str
    description: str
    created_at: datetime
    versions: list[ModelVersionOut]

    @staticmethod
    def resolve_versions(obj):
        return list(obj.versions.all())


class ReplicaOut(Schema):
    id: int
    node: str
    region: str
    model_version: str
    state: str
    error: str
    gpu_index: int | None

    @staticmethod
    def resolve_model_version(obj):
        return str(obj.model_version)

    @staticmethod
    def resolve_node(obj):
        return obj.node.name

    @staticmethod
    def resolve_region(obj):
        return obj.node.region


class DeploymentIn(StrictIn):
    name: str
    model_version_id: int
    replicas: int = 1
    region: str = Field("", description="a region's name (GET /regions); empty: the first in failover order")
    device: str = "cpu"
    max_batch_size: int = 8
    max_queue_delay_ms: int = 5
    node_selector: dict[str, str] = {}  # labels a node must carry, e.g. {"gpu": "a10"}


class DeploymentPatch(StrictIn):
    """Only the fields sent change; runtime settings roll out replica by replica."""

    replicas: int | None = None
    state: str | None = None
    model_version_id: int | None = None  # roll over to another version of the team's
    max_batch_size: int | None = None
    max_queue_delay_ms: int | None = None
    device: str | None = None
    region: str | None = None
    node_selector: dict[str, str] | None = None


class CanaryIn(StrictIn):
    """Start a canary of another version of the deployment's model, or change a running one's share."""

    model_version_id: int
    percent: int = Field(description="share of requests for the canary, 1-50")


class AutoscalingIn(StrictIn):
    """Bounds and target of autoscaling; `max_replicas` 0 turns it off."""

    min_replicas: int = Field(
        1, description="0 scales to zero after `scale_to_zero_after_s` idle; the next request wakes it"
    )
    max_replicas: int = Field(description="at most 32; 0 turns autoscaling off")
    target_inflight_per_replica: float = Field(4.0, description="requests in flight per ready replica")
    scale_cooldown_s: int = Field(60, description="seconds after a change before the next one")
    scale_to_zero_after_s: int = Field(
        300, description="with min_replicas 0: seconds without a request before scaling to zero (1-86400)"
    )


class DeploymentOut(Schema):
    id: int
    name: str
    model_version: str
    model_version_id: int
    task: str
    replicas: int
    ready_replicas: int
    region: str
    device: str
    max_batch_size: int
    max_queue_delay_ms: int
    desired_state: str
    status: str
    node_selector: dict
    placement: dict = Field(
        description="where replicas run by region, unplaced replicas with each node's reason, and a note "
        "when the preferred region could not take them"
    )
    replica_set: list[ReplicaOut]
    rollout: dict = Field(
        description="the last change of what replicas run: kind (update or canary), state (in_progress, "
        "done, rolled_back, aborted, failed), from and to (settings before and after), reason, times"
    )
    canary_version_id: int | None
    canary_version: str | None
    canary_percent: int
    canary: dict | None = Field(
        description="with a canary: both versions' replicas, requests/s, error rate and latency "
        "percentiles side by side, from the runners' latest per-second summaries"
    )
    autoscaling: dict = Field(
        description="enabled, min_replicas, max_replicas, target_inflight_per_replica, scale_cooldown_s, "
        "scale_to_zero_after_s, scaled_to_zero, inflight (the latest sample) and the last decisions with "
        "their reasons"
    )
    created_at: datetime

    @staticmethod
    def resolve_model_version(obj):
        return str(obj.model_version)

    @staticmethod
    def resolve_canary_version(obj):
        return str(obj.canary_version) if obj.canary_version_id else None

    @staticmethod
    def resolve_canary(obj):
        return canary_figures(obj)

    @staticmethod
    def resolve_autoscaling(obj):
        state = obj.autoscale or {}
        samples = state.get("samples") or []
        return {"enabled": obj.max_replicas > 0, "min_replicas": obj.min_replicas, "max_replicas": obj.max_replicas,
                "target_inflight_per_replica": obj.target_inflight_per_replica,
                "scale_cooldown_s": obj.scale_cooldown_s, "scale_to_zero_after_s": obj.scale_to_zero_after_s,
                "scaled_to_zero": obj.max_replicas > 0 and obj.replicas == 0,
                "inflight": samples[-1][1] if samples else None,
                "decisions": state.get("decisions") or []}  # fmt: skip

    @staticmethod
    def resolve_task(obj):
        return obj.model_version.model.task

    @staticmethod
    def resolve_ready_replicas(obj):
        return sum(1 for r in obj.replica_set.all() if r.state == "ready")

    @staticmethod
    def resolve_status(obj):
        return deployment_status(obj)

    @staticmethod
    def resolve_replica_set(obj):
        return list(obj.replica_set.all())


class NodeOut(Schema):
    id: int
    name: str
    region: str
    status: str = Field(description="liveness: online (Ready) or offline (Not ready)")
    mode: str = Field(description="scheduling: active, cordoned or draining")
    state_label: str = Field(description='for people: "Ready", "Not ready", "Ready, cordoned", ...')
    labels: dict
    inventory: dict
    last_heartbeat_at: datetime | None
    replicas: int
    team: str | None = Field(None, description="the team a team-brought node serves alone; null: shared")

    @staticmethod
    def resolve_team(obj):
        return obj.team.name if obj.team_id else None

    @staticmethod
    def resolve_replicas(obj):
        count = getattr(obj, "replica_count", None)  # annotated by selectors.nodes_with_load (lists)
        return obj.replicas.count() if count is None else count


class ReplicaReport(StrictIn):
    id: int
    state: str
    url: str = ""
    error: str = ""
    gpu_memory_bytes: int | None = None  # measured by the agent once the runner loaded


class HeartbeatIn(StrictIn):
    region: str
    inventory: dict = {}
    replicas: list[ReplicaReport] = []


class HeartbeatOut(Schema):
    node: str
    region: str
    replicas: list[dict]
    rotate_credential: bool = Field(description="when true, call POST /nodes/credential for a new token")


class NodeJoinIn(StrictIn):
    """Checked in this order: the join token (401/409) before the fields (422), so a caller without
    a valid token learns nothing else."""

    join_token: str = ""
    name: str = ""
    region: str = ""
    labels: dict = {}


class NodeJoinOut(Schema):
    node: str
    region: str
    node_token: str = Field(description="this node's credential, shown once; stored hashed")


class NodeCredentialOut(Schema):
    node_token: str


class RegionIn(StrictIn):
    name: str = Field(description="lowercase letters, digits and dashes (max 32), e.g. sg; never changes")
    display_name: str = Field(description="the region's name for people, e.g. Singapore")
    failover_order: int | None = Field(
        None,
        description="where it comes in listings and placement's fall-back, lowest first; "
        "empty: after every region",
    )


class RegionPatch(StrictIn):
    """Only the fields sent change; a region's name does not."""

    display_name: str | None = None
    failover_order: int | None = None


class RegionOut(Schema):
    name: str
    display_name: str
    failover_order: int
    created_at: datetime
    updated_at: datetime


class NodePoolIn(StrictIn):
    name: str
    selector: dict = Field({}, description="labels a node must all carry to be in the pool")
    nodes: list[str] = Field([], description="nodes in the pool by name, whatever their labels")


class NodePoolOut(Schema):
    name: str
    selector: dict
    nodes: list[str]
    created_at: datetime


class FleetGrantIn(StrictIn):
    pools: list[str] = Field([], description="node pools the team may use; empty: every shared node")
    max_replicas: int | None = Field(None, ge=0, description="replicas across the team's deployments")
    max_gpus: int | None = Field(None, ge=0, description="GPU replicas (each holds one GPU)")
    max_gpu_memory_bytes: int | None = Field(None, ge=0, description="GPU memory its replicas may take")


class FleetGrantOut(Schema):
    team: str
    team_id: int
    pools: list[str]
    max_replicas: int | None
    max_gpus: int | None
    max_gpu_memory_bytes: int | None


class JoinTokenIn(StrictIn):
    region: str
    labels: dict = {}
    ttl_s: int = 3600
    name_hint: str = ""
    for_team: bool = Field(False, description="a node the current team alone uses (needs LANTAU_TEAM_NODES)")


class JoinTokenOut(Schema):
    id: int
    join_token: str = Field(description="shown once; give it to the new node's agent")
    region: str
    labels: dict
    name_hint: str
    expires_at: datetime


class JobIn(StrictIn):
    """Start a job of ``kind`` on a version; ``options`` follow that kind's schema (x-options-by-kind)."""

    version_id: int
    kind: Annotated[str, KindNameSchema()] = Field(description="one of the registered job kinds")
    options: Annotated[dict, KindOptionsSchema()] = {}


class JobOut(Schema):
    id: int
    kind: str
    status: str
    progress: float
    message: str
    error: str
    source_id: int | None
    source: str | None
    output_id: int | None
    output: str | None
    options: dict
    result: dict
    attempts: int
    created_by: str | None
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None

    @staticmethod
    def resolve_source(obj):
        return str(obj.source) if obj.source_id else f"upload of {obj.options.get('name', '?')}"

    @staticmethod
    def resolve_result(obj):
        return public_result(obj.result or {})  # no server storage paths in what callers see

    @staticmethod
    def resolve_output(obj):
        return str(obj.output) if obj.output_id else None

    @staticmethod
    def resolve_created_by(obj):
        return obj.created_by.username if obj.created_by else None


class JobLogOut(Schema):
    at: datetime
    progress: float
    message: str
