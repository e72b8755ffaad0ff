"""The node agent's side of the management API: heartbeat, desired state, artifact download."""

import hashlib
import time
from datetime import timedelta

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from inference import liveness
from inference.credentials import runner_token
from inference.models import GpuFootprint, Node, Replica
from inference.services.deployments import DeploymentSpec, deployment_create, deployment_reconcile
from inference.services.nodes import node_token_create, nodes_sweep
from tests.support.hardware import A10

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _no_heartbeats_remembered(db):
    for name in ("hk-1", "us-1"):
        liveness.forget(name)


@pytest.fixture
def node_token(db):
    return node_token_create(name="hk-1", region="hk")[1]


def beat(token, replicas=(), region="hk", inventory=None):
    return Client().post(
        "/api/v1/nodes/heartbeat",
        {"region": region, "inventory": inventory or {"cpus": 2}, "replicas": list(replicas)},
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {token}",
    )


def test_node_token_is_stored_as_hash_only(node_token):
    node = Node.objects.get(name="hk-1")
    assert node.token_hash == hashlib.sha256(node_token.encode()).hexdigest()
    assert node_token not in str(Node.objects.filter(pk=node.pk).values().get())


def test_heartbeat_needs_a_valid_token_and_matching_region(node_token):
    assert beat("ltn_wrong").status_code == 401
    r = beat(node_token, region="us")
    assert r.status_code == 409 and "region" in r.json()["error"]["message"]
    ok = beat(node_token)
    assert ok.status_code == 200 and ok.json()["replicas"] == []
    assert Node.objects.get(name="hk-1").status == "online"


def test_heartbeat_returns_desired_replicas_and_records_their_state(node_token, owner, team, colour_version):
    beat(node_token)
    d = deployment_create(
        team=team, actor=owner, spec=DeploymentSpec(name="colours", model_version_id=colour_version.pk)
    )
    deployment_reconcile(d.pk)
    desired = beat(node_token).json()["replicas"]
    assert len(desired) == 1
    spec = desired[0]
    assert spec["deployment"] == "colours" and "labels" not in spec["manifest"]  # heartbeats stay small
    assert sorted(a["filename"] for a in spec["artifacts"]) == ["labels.json", "model.onnx"]
    assert spec["runner_token"] == runner_token(spec["id"])
    assert colour_version.sha256 in {a["sha256"] for a in spec["artifacts"]}
    beat(node_token, [{"id": spec["id"], "state": "ready", "url": "http://127.0.0.1:9999"}])
    replica = Replica.objects.get(pk=spec["id"])
    assert (replica.state, replica.url) == ("ready", "http://127.0.0.1:9999")


def test_artifacts_download_only_to_the_node_hosting_them(node_token, owner, team, colour_version):
    other_token = node_token_create(name="us-1", region="us")[1]
    beat(node_token)
    d = deployment_create(
        team=team, actor=owner, spec=DeploymentSpec(name="colours", model_version_id=colour_version.pk)
    )
    deployment_reconcile(d.pk)
    url = f"/api/v1/nodes/artifacts/{colour_version.sha256}"
    r = Client().get(url, HTTP_AUTHORIZATION=f"Bearer {node_token}")
    assert r.status_code == 200
    assert hashlib.sha256(b"".join(r.streaming_content)).hexdigest() == colour_version.sha256
    assert Client().get(url, HTTP_AUTHORIZATION=f"Bearer {other_token}").status_code == 404
    assert (
        Client()
        .get("/api/v1/nodes/artifacts/..%2F..%2Fetc", HTTP_AUTHORIZATION=f"Bearer {node_token}")
        .status_code
        == 404
    )
    assert Client().get(url).status_code == 401


def test_silent_nodes_are_swept_offline_and_their_replicas_replaced(node_token, owner, team, colour_version):
    beat(node_token)
    d = deployment_create(
        team=team, actor=owner, spec=DeploymentSpec(name="colours", model_version_id=colour_version.pk)
    )
    deployment_reconcile(d.pk)
    Node.objects.filter(name="hk-1").update(last_heartbeat_at=timezone.now() - timedelta(minutes=5))
    assert nodes_sweep() == 0  # Redis heard it a moment ago: the stale row does not matter
    liveness.remember("hk-1", {}, time.time() - 300)
    assert nodes_sweep() == 1
    assert Node.objects.get(name="hk-1").status == "offline"
    deployment_reconcile(d.pk)
    assert Replica.objects.count() == 0  # nowhere to go: no other node is online


def test_a_steady_heartbeat_writes_no_node_row(node_token):
    assert beat(node_token).status_code == 200  # first beat: the node comes online (a write)
    with CaptureQueriesContext(connection) as queries:
        assert beat(node_token).status_code == 200
    writes = [q["sql"] for q in queries.captured_queries if q["sql"].startswith(("UPDATE", "INSERT"))]
    assert writes == []
    assert "hk-1" in liveness.seen_all()


def test_a_changed_inventory_is_written_and_a_returning_node_comes_back(node_token):
    beat(node_token)
    beat(node_token, inventory={"cpus": 2, "gpus": [A10], "providers": ["CUDAExecutionProvider"]})
    node = Node.objects.get(name="hk-1")
    assert node.inventory["gpus"][0]["name"] == "NVIDIA A10"
    Node.objects.filter(pk=node.pk).update(status="offline")
    beat(node_token)
    assert Node.objects.get(name="hk-1").status == "online"
    assert Node.objects.filter(name="hk-1").count() == 1


def test_an_edge_nodes_edge_is_written_when_it_changes_and_shown_on_the_node_page(
    node_token, install_admin, owner_client
):
    # (the edge's address is shown to install administrators: review L-A)
    from inference.selectors import node_inventory_rows

    starting = {"cpus": 2, "advertise_host": "10.0.0.7", "edge": {"port": 8443, "ready": False,
                                                                  "error": "restarting in 1.0 s: exit 1"}}  # fmt: skip
    assert beat(node_token, inventory=starting).status_code == 200
    node = Node.objects.get(name="hk-1")
    assert ("Edge", "not ready on 10.0.0.7:8443 (restarting in 1.0 s: exit 1)") in node_inventory_rows(node)
    serving = {**starting, "edge": {"port": 8443, "ready": True, "error": ""}}
    assert beat(node_token, inventory=serving).status_code == 200  # the edge's state alone is a write
    node = Node.objects.get(name="hk-1")
    assert ("Edge", "serving on 10.0.0.7:8443") in node_inventory_rows(node)
    assert b"serving on 10.0.0.7:8443" in owner_client.get("/nodes/hk-1/").content
    assert ("Edge", "serving on 10.0.0.7:8443") not in node_inventory_rows(
        Node(name="x", inventory={"cpus": 2})
    )


def test_gpu_replicas_carry_their_gpu_and_report_their_footprint(node_token, owner, team, colour_version):
    gpu_inventory = {"cpus": 2, "gpus": [A10], "providers": ["CUDAExecutionProvider", "CPUExecutionProvider"]}
    beat(node_token, inventory=gpu_inventory)
    d = deployment_create(
        team=team,
        actor=owner,
        spec=DeploymentSpec(name="colours", model_version_id=colour_version.pk, device="cuda"),
    )
    deployment_reconcile(d.pk)
    spec = beat(node_token, inventory=gpu_inventory).json()["replicas"][0]
    assert (spec["device"], spec["gpu_index"]) == ("cuda", 0)
    report = {
        "id": spec["id"],
        "state": "ready",
        "url": "http://127.0.0.1:9999",
        "gpu_memory_bytes": 123456789,
    }
    beat(node_token, [report], inventory=gpu_inventory)
    footprint = GpuFootprint.objects.get(model_version=colour_version)
    assert (footprint.gpu_name, footprint.device, footprint.bytes) == ("NVIDIA A10", "cuda", 123456789)


def test_rotation_is_asked_in_the_heartbeat_and_the_old_credential_stops(
    node_token, install_admin, owner_client
):
    beat(node_token)
    assert beat(node_token).json()["rotate_credential"] is False
    assert owner_client.post("/api/v1/nodes/hk-1/rotate").status_code == 200
    assert beat(node_token).json()["rotate_credential"] is True
    r = Client().post("/api/v1/nodes/credential", HTTP_AUTHORIZATION=f"Bearer {node_token}")
    assert r.status_code == 200
    new = r.json()["node_token"]
    assert (
        new != node_token
        and Node.objects.get(name="hk-1").token_hash == hashlib.sha256(new.encode()).hexdigest()
    )
    assert beat(node_token).status_code == 401
    assert beat(new).json()["rotate_credential"] is False
    assert Client().post("/api/v1/nodes/credential").status_code == 401
