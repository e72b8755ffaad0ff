from datetime import datetime
from typing import Annotated

from ninja import Field, Schema

from inference.jobs.registry import KindNameSchema, KindOptionsSchema
from inference.reports import public_result
from inference.selectors import deployment_status


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
    state: str
    error: str

    @staticmethod
    def resolve_node(obj):
        return obj.node.name

    @staticmethod
    def resolve_region(obj):
        return obj.node.region


class DeploymentIn(Schema):
    name: str
    model_version_id: int
    replicas: int = 1
    region: str = "hk"
    device: str = "cpu"
    max_batch_size: int = 8
    max_queue_delay_ms: int = 5


class DeploymentPatch(Schema):
    replicas: int | None = None
    state: str | None = None
    model_version_id: int | None = None  # roll over to another version of the team's


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
    replica_set: list[ReplicaOut]
    created_at: datetime

    @staticmethod
    def resolve_model_version(obj):
        return str(obj.model_version)

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
    status: str
    inventory: dict
    last_heartbeat_at: datetime | None
    replicas: int

    @staticmethod
    def resolve_replicas(obj):
        return obj.replicas.count()


class ReplicaReport(Schema):
    id: int
    state: str
    url: str = ""
    error: str = ""


class HeartbeatIn(Schema):
    region: str
    inventory: dict = {}
    replicas: list[ReplicaReport] = []


class JobIn(Schema):
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
