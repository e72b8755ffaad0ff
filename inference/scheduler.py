"""Placement: which node gets a new replica. A chain of filters, then one score.

Filters drop nodes that cannot host the replica; the score prefers the deployment's region, then the
node with the fewest replicas. A deployment whose region has no room is placed in the other region
(fail-over), so traffic still has somewhere to go.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from inference.models import Deployment, Device, Node, NodeStatus

Filter = Callable[[Deployment, Node, dict[int, int]], bool]


def node_is_online(deployment: Deployment, node: Node, load: dict[int, int]) -> bool:
    return node.status == NodeStatus.ONLINE


def node_has_device(deployment: Deployment, node: Node, load: dict[int, int]) -> bool:
    return deployment.device == Device.CPU or node.has_gpu


def node_has_room(deployment: Deployment, node: Node, load: dict[int, int]) -> bool:
    return load.get(node.pk, 0) < node.max_replicas


FILTERS: Sequence[Filter] = (node_is_online, node_has_device, node_has_room)


def node_score(deployment: Deployment, node: Node, load: dict[int, int], used: set[int]) -> tuple:
    # Lower is better: own region first, spread replicas of one deployment, then least loaded.
    return (node.region != deployment.region, node.pk in used, load.get(node.pk, 0), node.name)


def place(deployment: Deployment, nodes: Sequence[Node], load: dict[int, int], used: set[int]) -> Node | None:
    """Pick a node for one more replica of `deployment`, or None when no node fits."""
    fit = [n for n in nodes if all(f(deployment, n, load) for f in FILTERS)]
    if not fit:
        return None
    return min(fit, key=lambda n: node_score(deployment, n, load, used))
