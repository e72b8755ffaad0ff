"""Scorers: order the nodes every filter accepted (lower is better)."""

from __future__ import annotations

import hashlib

from inference.scheduler.types import Ask, Candidate


def other_region(ask: Ask, c: Candidate) -> int:
    """The deployment's region first; the others only as a fall-back, in failover order (a region the
    table does not list, last)."""
    region = c.node.region
    if region == ask.deployment.region:
        return 0
    return 1 + (ask.regions.index(region) if region in ask.regions else len(ask.regions))


def crowding(ask: Ask, c: Candidate) -> int:
    """Spread a deployment's replicas across nodes, so one machine going down takes one replica."""
    return c.mine


def load(ask: Ask, c: Candidate) -> float:
    return c.replicas / max(1, c.node.max_replicas)


def tie_break(ask: Ask, c: Candidate) -> int:
    """Among equals, an order of the nodes that is stable for a deployment but differs between
    deployments: reconciles of several deployments running at once read the same counts, and breaking
    ties by node name sent all of them to the same first nodes (a fleet of equal nodes filled unevenly)."""
    key = f"{ask.deployment.name}/{c.node.name}".encode()
    return int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "big")


def score(ask: Ask, c: Candidate) -> tuple:
    return (other_region(ask, c), crowding(ask, c), load(ask, c), tie_break(ask, c), c.node.name)
