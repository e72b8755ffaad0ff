"""Deployments (desired state, written by people) and replicas (placed by the scheduler, run by agents).

Replica state machine, with who moves it:
  PENDING  --agent starts runner-->  STARTING  --runner /readyz ok-->  READY
  any      --runner exits/fails-->  FAILED (agent reports; the reconciler replaces it)
  a replica on a draining node, or started with older settings, keeps serving until a replacement
  is READY (services.deployments.deployment_reconcile).
  a rollout whose new replica turns FAILED, or has none READY within LANTAU_ROLLOUT_READY_TIMEOUT_S,
  is rolled back by the reconciler (services.rollouts), one whose new replicas answer too many errors
  by the rollout watch (services.rollout_watch): the old replicas never stopped serving.
  replicas no longer desired are deleted by the reconciler; the agent stops runners it no longer sees.
"""

from __future__ import annotations

from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models

from contract.replicas import ReplicaState as WireReplicaState


class Device(models.TextChoices):
    CPU = "cpu", "CPU"
    CUDA = "cuda", "CUDA GPU"
    TENSORRT = "tensorrt", "TensorRT GPU"


class DesiredState(models.TextChoices):
    RUNNING = "running", "Running"
    PAUSED = "paused", "Paused"


class Deployment(models.Model):
    team = models.ForeignKey("accounts.Team", on_delete=models.CASCADE, related_name="deployments")
    name = models.SlugField(
        max_length=64, unique=True
    )  # global: it is the public route /v1/deployments/<name>
    model_version = models.ForeignKey(
        "inference.ModelVersion", on_delete=models.PROTECT, related_name="deployments"
    )
    replicas = models.PositiveIntegerField(default=1, validators=[MaxValueValidator(32)])
    # A Region's name (``models.regions``; checked by ``services.regions.region_require``). The default
    # is the seeded region, for rows made outside the services (which always set it).
    region = models.CharField(max_length=32, default="hk")
    device = models.CharField(max_length=8, choices=Device.choices, default=Device.CPU)
    max_batch_size = models.PositiveIntegerField(
        default=8, validators=[MinValueValidator(1), MaxValueValidator(256)]
    )
    max_queue_delay_ms = models.PositiveIntegerField(default=5, validators=[MaxValueValidator(1000)])
    desired_state = models.CharField(
        max_length=16, choices=DesiredState.choices, default=DesiredState.RUNNING
    )
    # Labels a node must carry to host a replica, e.g. {"gpu": "a10", "tier": "edge"}.
    node_selector = models.JSONField(default=dict, blank=True)
    # Written by the reconciler: where replicas run and, for any it could not place, why per node
    # (services.deployments.placement_record); shown by the API and the deployment page.
    placement = models.JSONField(default=dict, blank=True)
    # The last change of what replicas run (services.rollouts): {"kind": "update"|"canary", "state":
    # in_progress|done|rolled_back|aborted|failed, "from"/"to" (the settings before and after, "from"
    # being what a rollback returns to), "reason", times, "watch" (errors counted)}. {} before any.
    rollout = models.JSONField(default=dict, blank=True)
    # A canary: extra replicas of another version of the same model take about this share of requests
    # (route entries carry it; inference.edge.balancer draws by it). Promote or abort ends it.
    canary_version = models.ForeignKey(
        "inference.ModelVersion", on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    canary_percent = models.PositiveSmallIntegerField(default=0, validators=[MaxValueValidator(50)])
    # Autoscaling (services.autoscale; off while max_replicas is 0): `replicas` is moved between the
    # bounds so each ready replica has about `target_inflight_per_replica` requests in flight, at most
    # one change per `scale_cooldown_s`; `autoscale` keeps the recent samples and decisions with reasons.
    # With `min_replicas` 0 it scales to zero after `scale_to_zero_after_s` without a request, and the
    # first request after that wakes it (held at the edge meanwhile).
    min_replicas = models.PositiveIntegerField(default=1, validators=[MaxValueValidator(32)])
    max_replicas = models.PositiveIntegerField(default=0, validators=[MaxValueValidator(32)])
    target_inflight_per_replica = models.FloatField(default=4.0)
    scale_cooldown_s = models.PositiveIntegerField(default=60)
    scale_to_zero_after_s = models.PositiveIntegerField(default=300)
    autoscale = models.JSONField(default=dict, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    @property
    def rollout_words(self) -> str:
        """The rollout's state for people: "in progress", "rolled back", ..."""
        return str((self.rollout or {}).get("state") or "").replace("_", " ")


class ReplicaState(models.TextChoices):
    """The wire contract's words (contract.replicas, reported by node agents), with labels for pages."""

    PENDING = WireReplicaState.PENDING.value, "Pending"
    STARTING = WireReplicaState.STARTING.value, "Starting"
    READY = WireReplicaState.READY.value, "Ready"
    FAILED = WireReplicaState.FAILED.value, "Failed"


class Replica(models.Model):
    deployment = models.ForeignKey(Deployment, on_delete=models.CASCADE, related_name="replica_set")
    node = models.ForeignKey("inference.Node", on_delete=models.CASCADE, related_name="replicas")
    model_version = models.ForeignKey(
        "inference.ModelVersion", on_delete=models.PROTECT, related_name="replicas"
    )
    state = models.CharField(max_length=16, choices=ReplicaState.choices, default=ReplicaState.PENDING)
    url = models.CharField(max_length=200, blank=True)
    error = models.TextField(blank=True)
    gpu_index = models.PositiveIntegerField(null=True, blank=True)  # the GPU the scheduler pinned it to
    # Digest of the settings the runner was started with (services.deployments.spec_digest): a replica
    # whose digest differs from its deployment's is rolled over, one at a time.
    spec = models.CharField(max_length=16, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["deployment__name", "pk"]
