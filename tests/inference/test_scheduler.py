"""Placement rules on named hardware."""

import pytest

from inference import scheduler
from inference.models import Deployment

pytestmark = pytest.mark.django_db


def deployment(version, **kw):
    return Deployment(team=version.model.team, name="d", model_version=version, **kw)


def test_prefers_the_deployments_region(colour_version, node_hk_cpu, node_us_cpu):
    nodes = [node_us_cpu, node_hk_cpu]
    assert scheduler.place(deployment(colour_version, region="hk"), nodes, {}, set()) == node_hk_cpu
    assert scheduler.place(deployment(colour_version, region="us"), nodes, {}, set()) == node_us_cpu


def test_fails_over_to_the_other_region_when_own_region_is_down(colour_version, node_hk_offline, node_us_cpu):
    chosen = scheduler.place(
        deployment(colour_version, region="hk"), [node_hk_offline, node_us_cpu], {}, set()
    )
    assert chosen == node_us_cpu


def test_cuda_deployments_only_go_to_gpu_nodes(colour_version, node_hk_cpu, node_us_gpu):
    d = deployment(colour_version, region="hk", device="cuda")
    assert scheduler.place(d, [node_hk_cpu, node_us_gpu], {}, set()) == node_us_gpu
    assert scheduler.place(d, [node_hk_cpu], {}, set()) is None


def test_full_nodes_are_skipped_and_replicas_spread(colour_version, node_hk_cpu):
    from inference.models import Node

    second = Node.objects.create(
        name="hk-cpu-2", region="hk", token_prefix="x", token_hash="y" * 64, status="online", max_replicas=8
    )
    d = deployment(colour_version, region="hk")
    assert scheduler.place(d, [node_hk_cpu, second], {node_hk_cpu.pk: 8}, set()) == second
    assert scheduler.place(d, [node_hk_cpu, second], {}, {node_hk_cpu.pk}) == second
