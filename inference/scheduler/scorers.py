"""Scorers: order the nodes every filter accepted (lower is better)."""

from __future__ import annotations

from inference.scheduler.types import Ask, Candidate


def other_region(ask: Ask, c: Candidate) -> int:
    """The deployment's region first; the other region only as a fall-back."""
    return int(c.node.region != ask.deployment.region)


def crowding(ask: Ask, c: Candidate) -> int:
    """Spread a deployment's replicas across nodes, so one machine going down takes one replica."""
    return c.mine


def load(ask: Ask, c: Candidate) -> float:
    return c.replicas / max(1, c.node.max_replicas)


def score(ask: Ask, c: Candidate) -> tuple:
    return (other_region(ask, c), crowding(ask, c), load(ask, c), c.node.name)
