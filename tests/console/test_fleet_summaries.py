"""The dashboard and the deployment list at fleet scale: replicas summed up per state (one pill per
state with its count), the same status words as the detail page and API, and a number of queries
that does not grow with the replicas."""

from __future__ import annotations

import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from inference import selectors
from inference.models import Deployment, Node, Replica
from inference.services.registry import UploadedModel, model_version_upload
from tests.support import hardware
from tests.support.tiny_models import COLOURS, colour_classifier

pytestmark = pytest.mark.django_db


@pytest.fixture
def version(team, owner, tmp_path):
    path = colour_classifier(tmp_path / "c.onnx")
    upload = UploadedModel(name="fs-colours", task="image-classification", model_chunks=[path.read_bytes()],
                           labels_text="\n".join(COLOURS))  # fmt: skip
    return model_version_upload(team=team, actor=owner, upload=upload)


def with_replicas(team, version, name: str, states: list[str], nodes, **kw) -> Deployment:
    deployment = Deployment.objects.create(
        team=team, name=name, model_version=version, replicas=len(states), **kw
    )
    for index, state in enumerate(states):
        Replica.objects.create(deployment=deployment, node=nodes[index % len(nodes)], model_version=version,
                               state=state, error="oom at load" if state == "failed" else "")  # fmt: skip
    return deployment


def pills(html: str, name: str) -> list[tuple[str, str]]:
    row = re.search(rf'<tr data-deployment="{name}">.*?<td class="status">(.*?)</td>', html, re.S)
    assert row is not None, name
    return re.findall(r'<span class="pill ([a-z -]+)"[^>]*>([^<]*)</span>', row.group(1))


def test_the_list_shows_a_count_per_state_ready_first(owner_client, team, version):
    nodes = [hardware.node("hk-cpu-1", "hk"), hardware.node("hk-cpu-2", "hk")]
    with_replicas(team, version, "mixed", ["failed", "ready", "starting", "ready", "ready"], nodes)
    with_replicas(team, version, "single", ["ready"], nodes)
    Deployment.objects.create(team=team, name="held", model_version=version, desired_state="paused")
    Deployment.objects.create(team=team, name="waiting", model_version=version, replicas=1)
    html = owner_client.get("/deployments/").content.decode()
    assert pills(html, "mixed") == [("ready", "3 × ready"), ("starting", "starting"), ("failed", "failed")]
    assert 'data-count="3"' in html and 'title="3 replicas ready"' in html
    assert pills(html, "single") == [("ready", "ready")]
    assert pills(html, "held") == [("paused", "paused")]
    assert pills(html, "waiting") == [("unplaced", "unplaced")]  # not a green "running" pill


@pytest.mark.parametrize(
    "states, replicas, expected",
    [
        (["ready", "ready"], 2, "ready"),
        (["ready", "failed"], 2, "degraded"),
        (["failed", "starting"], 2, "failed"),
        (["pending"], 1, "starting"),
        ([], 1, "unplaced"),
    ],
)
def test_counted_status_is_the_status_the_replicas_give(team, version, states, replicas, expected):
    nodes = [hardware.node("hk-cpu-1", "hk")]
    deployment = with_replicas(team, version, "d", states, nodes)
    Deployment.objects.filter(pk=deployment.pk).update(replicas=replicas)
    (counted,) = selectors.deployments_with_state_counts(team=team)
    (listed,) = selectors.deployments_for_team(team=team)
    assert selectors.deployment_status(counted) == selectors.deployment_status(listed) == expected


def test_the_dashboard_says_why_and_where_with_counted_replicas(owner_client, team, version):
    us = hardware.node("us-cpu-1", "us")
    with_replicas(team, version, "astray", ["ready", "failed"], [us], region="hk")
    html = owner_client.get("/").content.decode()
    card = re.search(
        r'<div class="card attention" data-deployment="astray" data-elsewhere="US">(.*?)</div>', html, re.S
    )
    assert card is not None
    assert "oom at load" in card.group(1) and "placed in US, not HK" in card.group(1)
    assert "degraded" in card.group(1)


@pytest.mark.parametrize("path", ["/", "/deployments/"])
def test_queries_do_not_grow_with_the_replicas(owner_client, team, version, path):
    nodes = [hardware.node(f"hk-cpu-{i}", "hk", max_replicas=64) for i in range(4)]
    deployments = [with_replicas(team, version, f"d{i}", ["ready"] * 2, nodes) for i in range(2)]
    owner_client.get(path)  # sessions, caches: the first request is not the measure
    with CaptureQueriesContext(connection) as small:
        assert owner_client.get(path).status_code == 200
    for deployment in deployments:
        for index in range(30):
            Replica.objects.create(
                deployment=deployment, node=nodes[index % 4], model_version=version, state="ready"
            )
    with CaptureQueriesContext(connection) as large:
        assert owner_client.get(path).status_code == 200
    assert len(large) == len(small), [q["sql"][:120] for q in large.captured_queries]


def test_a_ready_deployment_running_outside_its_region_says_so_on_the_list_and_the_dashboard(
    owner_client, owner, team, version
):
    """The issue's case: created for US on an install whose only node is in HK, placed there, ready."""
    from inference.services.deployments import DeploymentSpec, deployment_create, deployment_reconcile

    hardware.node("hk-cpu-1", "hk")
    made = deployment_create(team=team, actor=owner, spec=DeploymentSpec(name="wants-us", model_version_id=version.pk,
                                                                         replicas=1, region="us"))  # fmt: skip
    deployment_reconcile(made.pk)
    Replica.objects.filter(deployment=made).update(state="ready", url="http://127.0.0.1:20001")
    html = owner_client.get("/deployments/").content.decode()
    region = re.search(r'<tr data-deployment="wants-us">.*?<td class="region">(.*?)</td>', html, re.S)
    assert region is not None and region.group(1).startswith("US")
    assert "runs in HK</span>" in region.group(
        1
    ) and "preferred region us has no usable node" in region.group(1)
    assert pills(html, "wants-us") == [("ready", "ready")]
    dashboard = owner_client.get("/").content.decode()
    card = re.search(
        r'<div class="card attention" data-deployment="wants-us" data-elsewhere="HK">(.*?)</div>',
        dashboard,
        re.S,
    )
    assert card is not None, "a ready deployment outside its region needs attention"
    assert "placed in HK, not US" in card.group(1) and "no node there has joined" in card.group(1)
    # Once it runs where it asked to, neither page flags it.
    hardware.node("us-cpu-1", "us")
    Deployment.objects.filter(pk=made.pk).update(placement={"regions": {"us": 1}, "preferred_region": "us"})
    Replica.objects.filter(deployment=made).update(node=Node.objects.get(name="us-cpu-1"))
    assert "runs in" not in owner_client.get("/deployments/").content.decode()
    assert (
        'data-deployment="wants-us"'
        not in owner_client.get("/").content.decode().split('id="attention"')[1].split("<h2>")[0]
    )


@pytest.mark.parametrize("path", ["/", "/nodes/"])
def test_node_links_are_the_node_pages(owner_client, path):
    from django.urls import reverse

    for name in ("hk-cpu-1", "us-gpu-2"):
        hardware.node(name, name[:2])
    html = owner_client.get(path).content.decode()
    for name in ("hk-cpu-1", "us-gpu-2"):
        href = reverse("inference:node-detail", args=[name])
        assert f'<a href="{href}">{name}</a>' in html
        assert owner_client.get(href).status_code == 200
