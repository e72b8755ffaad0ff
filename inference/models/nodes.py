"""Machines that run replicas, the join tokens that let new ones in, and measured GPU footprints.

A node has two independent states, so that an operator's decision survives a network blip:

``status`` (liveness, NodeStatus), owned by the console:
  OFFLINE --heartbeat--> ONLINE            (services.nodes.node_heartbeat; the node is "Ready")
  ONLINE  --silent for LANTAU_NODE_OFFLINE_AFTER_S--> OFFLINE   (services.nodes.nodes_sweep, "Not ready")
  The gateway routes only to replicas on ONLINE nodes. DRAINING is a value older versions could hold;
  migration 0004 moved such rows to ``mode`` = draining.

``mode`` (scheduling, NodeMode), owned by operators (services.nodes.node_cordon/uncordon/drain):
  ACTIVE   --cordon--> CORDONED   no new replicas; the ones there keep serving
  ACTIVE or CORDONED --drain--> DRAINING   the reconciler places replacements elsewhere and removes a
           replica here only once its replacement is ready (no request fails)
  CORDONED or DRAINING --uncordon--> ACTIVE
Removing a node deletes its row (services.nodes.node_remove): its credential stops working and its
replicas are re-placed. The same machine joins again with a new join token under the same name.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone


class NodeStatus(models.TextChoices):
    ONLINE = "online", "Ready"
    OFFLINE = "offline", "Not ready"
    DRAINING = "draining", "Draining"  # legacy value; see the module docstring


class NodeMode(models.TextChoices):
    ACTIVE = "active", "Schedulable"
    CORDONED = "cordoned", "Cordoned"
    DRAINING = "draining", "Draining"


class NodeQuerySet(models.QuerySet):
    def visible_to(self, team_id: int | None) -> NodeQuerySet:
        """The nodes a team may see and use: the shared fleet and its own (review H-A); another team's
        own nodes do not exist for it. ``None``: the shared fleet alone."""
        return self.filter(models.Q(team__isnull=True) | models.Q(team_id=team_id))


class Node(models.Model):
    objects = NodeQuerySet.as_manager()

    name = models.SlugField(max_length=64, unique=True)
    region = models.CharField(max_length=32)  # a Region's name
    token_prefix = models.CharField(max_length=16)
    token_hash = models.CharField(max_length=64, unique=True)
    status = models.CharField(max_length=16, choices=NodeStatus.choices, default=NodeStatus.OFFLINE)
    mode = models.CharField(max_length=16, choices=NodeMode.choices, default=NodeMode.ACTIVE)
    labels = models.JSONField(default=dict, blank=True)
    inventory = models.JSONField(default=dict, blank=True)
    max_replicas = models.PositiveIntegerField(default=8)
    rotate_requested = models.BooleanField(default=False)  # told to the agent in heartbeat answers
    last_heartbeat_at = models.DateTimeField(null=True, blank=True)  # persisted at most every few s
    created_at = models.DateTimeField(auto_now_add=True)
    # A node a team brought with its own join token (LANTAU_TEAM_NODES): it serves that team alone and
    # is invisible to the others. None: the shared fleet, run by install administrators.
    team = models.ForeignKey(
        "accounts.Team", on_delete=models.CASCADE, null=True, blank=True, related_name="own_nodes"
    )

    class Meta:
        ordering = ["region", "name"]

    def __str__(self) -> str:
        return self.name

    @property
    def has_gpu(self) -> bool:
        return bool(self.inventory.get("gpus"))

    @property
    def is_ready(self) -> bool:
        return self.status == NodeStatus.ONLINE

    @property
    def schedulable(self) -> bool:
        return self.mode == NodeMode.ACTIVE

    @property
    def state_label(self) -> str:
        """One phrase for pages: "Ready", "Not ready", "Ready, cordoned", "Not ready, draining"."""
        ready = "Ready" if self.is_ready else "Not ready"
        return ready if self.mode == NodeMode.ACTIVE else f"{ready}, {self.mode}"


class JoinToken(models.Model):
    """A single-use, expiring secret a new node exchanges for its own credential (stored hashed)."""

    token_prefix = models.CharField(max_length=16)
    token_hash = models.CharField(max_length=64, unique=True)
    region = models.CharField(max_length=32)  # a Region's name
    labels = models.JSONField(default=dict, blank=True)
    name_hint = models.CharField(max_length=64, blank=True)
    team = models.ForeignKey("accounts.Team", on_delete=models.SET_NULL, null=True, related_name="+")
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField()
    used_at = models.DateTimeField(null=True, blank=True)
    used_by = models.CharField(max_length=64, blank=True)  # the node name it let in
    # The team the node will belong to (a team-brought node); None: the shared fleet.
    node_team = models.ForeignKey(
        "accounts.Team", on_delete=models.CASCADE, null=True, blank=True, related_name="+"
    )

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"join token {self.token_prefix}… ({self.region})"

    @property
    def expired(self) -> bool:
        return self.expires_at <= timezone.now()


class GpuFootprint(models.Model):
    """GPU memory a runner of one version took on one kind of GPU, as measured by the agent at first
    load; the scheduler uses it instead of its estimate next time."""

    model_version = models.ForeignKey(
        "inference.ModelVersion", on_delete=models.CASCADE, related_name="gpu_footprints"
    )
    gpu_name = models.CharField(max_length=128)
    device = models.CharField(max_length=8)
    max_batch_size = models.PositiveIntegerField()
    bytes = models.BigIntegerField()
    measured_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["model_version", "gpu_name", "device", "max_batch_size"], name="gpu_footprint_once"
            )
        ]


class NodePool(models.Model):
    """A named part of the shared fleet, defined by install administrators: the nodes whose labels
    include ``selector`` and the nodes named in ``nodes`` (either may be empty, not both)."""

    name = models.SlugField(max_length=64, unique=True)
    selector = models.JSONField(default=dict, blank=True)
    nodes = models.JSONField(default=list, blank=True)  # node names
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    def holds(self, node: Node) -> bool:
        if node.name in (self.nodes or []):
            return True
        labels = node.labels or {}
        return bool(self.selector) and all(labels.get(k) == v for k, v in self.selector.items())


class FleetGrant(models.Model):
    """What one team may use of the shared fleet: the pools (none: every shared node) and caps on its
    replicas, GPUs and GPU memory across all its deployments (None: no cap). Its own nodes are always
    its own. Set by install administrators (``services.fleet``)."""

    team = models.OneToOneField("accounts.Team", on_delete=models.CASCADE, related_name="fleet_grant")
    pools = models.ManyToManyField(NodePool, blank=True, related_name="grants")
    max_replicas = models.PositiveIntegerField(null=True, blank=True)
    max_gpus = models.PositiveIntegerField(null=True, blank=True)
    max_gpu_memory_bytes = models.BigIntegerField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)
