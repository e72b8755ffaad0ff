from inference.models.deployments import Deployment, DesiredState, Device, Replica, ReplicaState
from inference.models.jobs import Job, JobKind, JobLogLine, JobStatus
from inference.models.nodes import FleetGrant, GpuFootprint, JoinToken, Node, NodeMode, NodePool, NodeStatus
from inference.models.regions import Region
from inference.models.registry import Artifact, ModelFormat, ModelVersion, RegisteredModel, Task

__all__ = [
    "Artifact",
    "Deployment",
    "FleetGrant",
    "DesiredState",
    "Device",
    "Job",
    "JobKind",
    "JobLogLine",
    "JobStatus",
    "ModelFormat",
    "ModelVersion",
    "GpuFootprint",
    "JoinToken",
    "Node",
    "NodeMode",
    "NodePool",
    "NodeStatus",
    "Region",
    "RegisteredModel",
    "Replica",
    "ReplicaState",
    "Task",
]
