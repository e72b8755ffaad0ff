"""Replica state words, stored by the console (``inference.models.Replica.state``) and reported by agents.

Who moves each state is documented beside the Django model (``inference/models/deployments.py``); the
agent reports only STARTING, READY and FAILED in its heartbeat.
"""

from __future__ import annotations

from enum import StrEnum


class ReplicaState(StrEnum):
    PENDING = "pending"
    STARTING = "starting"
    READY = "ready"
    FAILED = "failed"


REPORTABLE = frozenset({ReplicaState.STARTING, ReplicaState.READY, ReplicaState.FAILED})
