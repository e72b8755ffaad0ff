"""Placement: which node (and which GPU on it) gets one more replica of a deployment.

A chain of small filters (``filters``), each answering None when a node can host the replica or a
short reason when it cannot, then scorers (``scorers``) ordering the nodes left: the deployment's
region first (then the other regions in failover order), then nodes holding fewer of its replicas
(spread), then the least loaded. A node's view (``Candidate``) is built from the database by
``cluster``; the rules themselves read only it.

When no node fits, the answer lists every node's reason ("hk-gpu-2: needs 3.1 GiB, 1.2 GiB free"),
which the reconciler stores on the deployment for the API and the deployment page.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from inference.scheduler.filters import FILTERS, pick_gpu
from inference.scheduler.memory import gib
from inference.scheduler.scorers import score
from inference.scheduler.types import Ask, Candidate

__all__ = ["Ask", "Candidate", "Choice", "Verdict", "gib", "place", "take"]


@dataclass(frozen=True)
class Choice:
    candidate: Candidate
    gpu_index: int | None


@dataclass
class Verdict:
    choice: Choice | None
    reasons: list[str] = field(default_factory=list)  # "<node>: <why not>", one per refused node


def refusal(ask: Ask, candidate: Candidate) -> str | None:
    """The first filter's reason for refusing ``candidate``, or None when it can host the replica."""
    for rule in FILTERS:
        reason = rule(ask, candidate)
        if reason is not None:
            return reason
    return None


def place(ask: Ask, candidates: Sequence[Candidate]) -> Verdict:
    """Pick a node (and GPU) for one more replica, or say why each node cannot take it."""
    fit: list[Candidate] = []
    reasons: list[str] = []
    for candidate in candidates:
        reason = refusal(ask, candidate)
        if reason is None:
            fit.append(candidate)
        else:
            reasons.append(f"{candidate.node.name}: {reason}")
    if not fit:
        return Verdict(None, reasons or ["no nodes have joined"])
    best = min(fit, key=lambda c: score(ask, c))
    return Verdict(Choice(best, pick_gpu(ask, best)), reasons)


def take(ask: Ask, choice: Choice) -> None:
    """Count a placed replica against its node, so the next placement in the same pass sees it."""
    candidate = choice.candidate
    candidate.replicas += 1
    candidate.mine += 1
    if ask.grant is not None:
        ask.grant.replicas += 1
    if choice.gpu_index is not None:
        candidate.gpu_free[choice.gpu_index] -= ask.need_on(candidate)
        if ask.grant is not None:
            ask.grant.gpus += 1
            ask.grant.gpu_memory_bytes += ask.need_on(candidate)
