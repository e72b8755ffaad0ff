"""What the placement rules read: the replica asked for and one node's current view."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from inference.models import Deployment, Node, NodePool


@dataclass
class Grant:
    """What the deployment's team may use of the fleet (``FleetGrant``) and what it uses now.

    ``pools`` empty: every shared node. Caps are None when not set. The usage counts grow as a pass
    places replicas (``scheduler.take``), so one pass never goes past a cap either."""

    team: str
    pools: list[NodePool] = field(default_factory=list)
    max_replicas: int | None = None
    max_gpus: int | None = None
    max_gpu_memory_bytes: int | None = None
    replicas: int = 0
    gpus: int = 0
    gpu_memory_bytes: int = 0


@dataclass
class Ask:
    """One more replica of ``deployment``; ``estimate`` is the GPU memory it is expected to take,
    ``measured`` what runners of this version actually took, by GPU name (preferred when known);
    ``grant`` what its team may use (None: no limits, as for the asks built to count memory);
    ``regions`` every region's name in failover order (the regions table), for the fall-back order."""

    deployment: Deployment
    estimate: int = 0
    measured: dict[str, int] = field(default_factory=dict)
    grant: Grant | None = None
    regions: tuple[str, ...] = ()

    @property
    def needs_gpu(self) -> bool:
        return self.deployment.device != "cpu"

    def need_on(self, candidate: Candidate) -> int:
        """GPU memory needed on this node's GPUs (they are taken to be one kind per node)."""
        if not self.needs_gpu:
            return 0
        return self.measured.get(candidate.gpu_name, self.estimate)


@dataclass
class Candidate:
    """A node as placement sees it: replicas counted so far and each GPU's free memory after the
    replicas already placed on it (reported free memory minus replicas not loaded yet)."""

    node: Node
    replicas: int = 0  # every deployment's replicas on the node
    mine: int = 0  # this deployment's
    gpu_free: dict[int, int] = field(default_factory=dict)
    last_seen: datetime | None = None

    @property
    def gpu_name(self) -> str:
        gpus = self.node.inventory.get("gpus") or []
        return str(gpus[0].get("name", "")) if gpus and isinstance(gpus[0], dict) else ""

    @property
    def providers(self) -> list[str] | None:
        found = self.node.inventory.get("providers")
        return [str(p) for p in found] if isinstance(found, list) else None
