"""Deployments (desired state, written by people) and replicas (placed by the scheduler, run by agents).

Replica state machine, with who moves it:
  PENDING  --agent starts runner-->  STARTING  --runner /readyz ok-->  READY
  any      --runner exits/fails-->  FAILED (agent reports; the reconciler replaces it)
  replicas no longer desired are deleted by the reconciler; the agent stops runners it no longer sees.
"""

from __future__ import annotations

from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models

from contract.replicas import ReplicaState as WireReplicaState


class Region(models.TextChoices):
    HK = "hk", "Hong Kong"
    US = "us", "United States"


class Device(models.TextChoices):
    CPU = "cpu", "CPU"
    CUDA = "cuda", "CUDA GPU"


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
    region = models.CharField(max_length=8, choices=Region.choices, default=Region.HK)
    device = models.CharField(max_length=8, choices=Device.choices, default=Device.CPU)
    max_batch_size = models.PositiveIntegerField(
        default=8, validators=[MinValueValidator(1), MaxValueValidator(256)]
    )
    max_queue_delay_ms = models.PositiveIntegerField(default=5, validators=[MaxValueValidator(1000)])
    desired_state = models.CharField(
        max_length=16, choices=DesiredState.choices, default=DesiredState.RUNNING
    )
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


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
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["deployment__name", "pk"]
