"""Machines that run replicas. Each node agent authenticates with its own token (stored as a hash).

Status transitions: the agent's heartbeat moves a node to ONLINE; the periodic sweep (Celery beat)
moves a silent node to OFFLINE; an operator moves it to DRAINING (no new replicas placed).
"""

from __future__ import annotations

from django.db import models


class NodeStatus(models.TextChoices):
    ONLINE = "online", "Online"
    OFFLINE = "offline", "Offline"
    DRAINING = "draining", "Draining"


class Node(models.Model):
    name = models.SlugField(max_length=64, unique=True)
    region = models.CharField(max_length=8)
    token_prefix = models.CharField(max_length=16)
    token_hash = models.CharField(max_length=64, unique=True)
    status = models.CharField(max_length=16, choices=NodeStatus.choices, default=NodeStatus.OFFLINE)
    labels = models.JSONField(default=dict, blank=True)
    inventory = models.JSONField(default=dict, blank=True)
    max_replicas = models.PositiveIntegerField(default=8)
    last_heartbeat_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["region", "name"]

    def __str__(self) -> str:
        return self.name

    @property
    def has_gpu(self) -> bool:
        return bool(self.inventory.get("gpus"))
