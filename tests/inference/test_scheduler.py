"""Placement rules on named hardware (tests.support.hardware): region, device, labels, GPU memory."""

import pytest

from inference import scheduler
from inference.models import Deployment, GpuFootprint, ModelVersion, Node
from inference.scheduler.cluster import ask_for, candidates

pytestmark = pytest.mark.django_db
GIB = 2**30


def deployment(version, **kw):
    return Deployment.objects.create(team=version.model.team, name="d", model_version=version, **kw)


def verdict(d):
    return scheduler.place(ask_for(d), candidates(d))


def chosen(d):
    choice = verdict(d).choice
    return None if choice is None else choice.candidate.node


def test_prefers_the_deployments_region(colour_version, node_hk_cpu, node_us_cpu):
    assert chosen(deployment(colour_version, region="us")) == node_us_cpu
    Deployment.objects.all().delete()
    assert chosen(deployment(colour_version, region="hk")) == node_hk_cpu


def test_fails_over_to_the_other_region_when_own_region_is_down(colour_version, node_hk_offline, node_us_cpu):
    result = verdict(deployment(colour_version, region="hk"))
    assert result.choice.candidate.node == node_us_cpu
    assert result.reasons == ["hk-cpu-down: not ready (no recent heartbeat)"]


def test_cuda_needs_a_gpu_and_cpu_nodes_say_so(colour_version, node_us_cpu, node_hk_a10_24g):
    d = deployment(colour_version, region="us", device="cuda")
    result = verdict(d)
    assert result.choice.candidate.node == node_hk_a10_24g and result.choice.gpu_index == 0
    node_hk_a10_24g.delete()
    refused = verdict(d)
    assert refused.choice is None
    assert refused.reasons == ["us-cpu-1: device cuda not available (no GPU)"]


def test_tensorrt_needs_its_execution_provider(colour_version, node_hk_two_t4, node_hk_a10_24g):
    d = deployment(colour_version, device="tensorrt")
    assert chosen(d) == node_hk_a10_24g
    node_hk_a10_24g.delete()
    assert verdict(d).reasons == ["hk-t4-1: device tensorrt not available (providers: CUDA, CPU)"]


def test_gpu_memory_must_fit_and_the_reason_gives_both_figures(
    colour_version, node_hk_a10_busy, node_hk_a10_24g
):
    ModelVersion.objects.filter(pk=colour_version.pk).update(size_bytes=int(1.3 * GIB))
    colour_version.refresh_from_db()
    d = deployment(colour_version, device="cuda", max_batch_size=8)
    result = verdict(d)
    assert result.choice.candidate.node == node_hk_a10_24g
    assert result.reasons == ["hk-gpu-2: needs 3.1 GiB, 1.2 GiB free"]
    node_hk_a10_24g.delete()
    assert verdict(d).choice is None


def test_a_measured_footprint_replaces_the_estimate(colour_version, node_hk_a10_busy):
    ModelVersion.objects.filter(pk=colour_version.pk).update(size_bytes=int(1.3 * GIB))
    colour_version.refresh_from_db()
    d = deployment(colour_version, device="cuda", max_batch_size=8)
    assert verdict(d).choice is None
    GpuFootprint.objects.create(model_version=colour_version, gpu_name="NVIDIA A10", device="cuda",
                                max_batch_size=8, bytes=int(0.8 * GIB))  # fmt: skip
    result = verdict(d)  # 0.8 GiB measured (+15% margin) fits the 1.2 GiB free
    assert result.choice.candidate.node == node_hk_a10_busy and result.choice.gpu_index == 0


def test_the_node_selector_matches_labels_and_says_what_the_node_has(
    colour_version, node_hk_cpu, node_hk_two_t4, node_hk_a10_24g
):
    d = deployment(colour_version, node_selector={"gpu": "a10"})
    result = verdict(d)
    assert result.choice.candidate.node == node_hk_a10_24g
    assert sorted(result.reasons) == [
        "hk-cpu-1: labels gpu=a10 not matched (node has none)",
        "hk-t4-1: labels gpu=a10 not matched (node has gpu=t4, tier=edge)",
    ]
    Deployment.objects.all().delete()
    edge = deployment(colour_version, node_selector={"tier": "edge", "gpu": "t4"})
    assert chosen(edge) == node_hk_two_t4


def test_gpu_replicas_spread_over_gpus_then_nodes(colour_version, node_hk_two_t4):
    d = deployment(colour_version, device="cuda")
    ask, cands = ask_for(d), candidates(d)
    picks = []
    for _ in range(2):
        result = scheduler.place(ask, cands)
        scheduler.take(ask, result.choice)
        picks.append(result.choice.gpu_index)
    assert sorted(picks) == [0, 1]  # the GPU with the most free memory each time


def test_full_cordoned_and_draining_nodes_take_no_new_replica(colour_version, node_hk_cpu, node_us_cpu):
    Node.objects.filter(pk=node_hk_cpu.pk).update(max_replicas=0)
    d = deployment(colour_version, region="hk")
    result = verdict(d)
    assert result.choice.candidate.node == node_us_cpu
    assert result.reasons == ["hk-cpu-1: full (0 of 0 replicas)"]
    Node.objects.filter(pk=node_us_cpu.pk).update(mode="cordoned")
    Node.objects.filter(pk=node_hk_cpu.pk).update(mode="draining", max_replicas=8)
    assert sorted(verdict(d).reasons) == [
        "hk-cpu-1: draining: takes no new replicas",
        "us-cpu-1: cordoned: takes no new replicas",
    ]


def test_a_deployments_replicas_spread_across_nodes(colour_version, node_hk_cpu):
    from tests.support import hardware

    second = hardware.node("hk-cpu-2", "hk")
    d = deployment(colour_version, region="hk")
    ask, cands = ask_for(d), candidates(d)
    first = scheduler.place(ask, cands).choice
    scheduler.take(ask, first)
    assert {first.candidate.node, scheduler.place(ask, cands).choice.candidate.node} == {node_hk_cpu, second}


def test_deployments_placed_at_once_do_not_all_pick_the_same_equal_nodes(colour_version):
    """Reconciles running side by side read the same counts; among equal nodes each deployment has its
    own stable order, so they spread instead of all taking the first node by name."""
    from tests.support import hardware

    nodes = [hardware.node(f"hk-cpu-{i}", "hk") for i in range(8)]
    first_picks = []
    for index in range(12):
        d = Deployment.objects.create(team=colour_version.model.team, name=f"d{index}", model_version=colour_version,
                                      region="hk")  # fmt: skip
        first_picks.append(chosen(d))  # every deployment sees the same empty nodes, as if placed at once
        assert chosen(d) == first_picks[-1]  # the same question always gets the same answer
    assert len(set(first_picks)) >= 5 and set(first_picks) <= set(nodes)


def test_with_no_nodes_the_reason_says_so(colour_version):
    assert verdict(deployment(colour_version)).reasons == ["no nodes have joined"]
