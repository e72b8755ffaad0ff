"""Nodes' lifecycle through the API: cordon, uncordon, drain (replace first, then retire), remove."""

import pytest

from inference.models import Node, Replica
from inference.services.deployments import deployment_reconcile
from tests.support import hardware

pytestmark = pytest.mark.django_db


def create(client, version, **kw):
    r = client.post("/api/v1/deployments", {"name": "colours", "model_version_id": version.pk, **kw},
                    content_type="application/json")  # fmt: skip
    assert r.status_code == 201, r.content
    return r.json()["id"]


def test_unknown_nodes_are_404_with_their_name(owner_client):
    for action in ("cordon", "uncordon", "drain", "rotate"):
        r = owner_client.post(f"/api/v1/nodes/nowhere/{action}")
        assert r.status_code == 404 and r.json()["error"]["message"] == "node 'nowhere' not found"
    assert owner_client.delete("/api/v1/nodes/nowhere").status_code == 404
    assert owner_client.get("/api/v1/nodes/nowhere").status_code == 404


def test_a_cordoned_node_keeps_its_replicas_and_takes_no_new_ones(owner_client, colour_version, node_hk_cpu):
    d = create(owner_client, colour_version, replicas=1)
    deployment_reconcile(d)
    r = owner_client.post("/api/v1/nodes/hk-cpu-1/cordon")
    assert (
        r.status_code == 200
        and r.json()["mode"] == "cordoned"
        and r.json()["state_label"] == "Ready, cordoned"
    )
    owner_client.patch("/api/v1/deployments/colours", {"replicas": 2}, content_type="application/json")
    deployment_reconcile(d)
    assert Replica.objects.count() == 1
    shown = owner_client.get("/api/v1/deployments/colours").json()["placement"]
    assert shown["unplaced"] == 1 and shown["reasons"] == ["hk-cpu-1: cordoned: takes no new replicas"]
    assert owner_client.post("/api/v1/nodes/hk-cpu-1/uncordon").json()["mode"] == "active"
    deployment_reconcile(d)
    assert Replica.objects.count() == 2


def test_draining_places_a_replacement_before_removing_the_old_replica(
    owner_client, colour_version, node_hk_cpu
):
    d = create(owner_client, colour_version, replicas=1)
    deployment_reconcile(d)
    Replica.objects.update(state="ready", url="http://127.0.0.1:1")
    old = Replica.objects.get()
    other = hardware.node("hk-cpu-2", "hk")
    assert owner_client.post("/api/v1/nodes/hk-cpu-1/drain").json()["mode"] == "draining"
    deployment_reconcile(d)
    assert sorted(Replica.objects.values_list("node__name", "state")) == [
        ("hk-cpu-1", "ready"),
        ("hk-cpu-2", "pending"),
    ]
    deployment_reconcile(d)  # idempotent while the replacement starts: the old one keeps serving
    assert Replica.objects.filter(pk=old.pk).exists() and Replica.objects.count() == 2
    Replica.objects.filter(node=other).update(state="ready")
    deployment_reconcile(d)
    assert list(Replica.objects.values_list("node__name", flat=True)) == ["hk-cpu-2"]


def test_removing_a_node_forgets_it_and_replaces_its_replicas(
    owner_client, colour_version, node_hk_cpu, node_us_cpu
):
    d = create(owner_client, colour_version, replicas=1)
    deployment_reconcile(d)
    assert Replica.objects.get().node == node_hk_cpu
    assert owner_client.delete("/api/v1/nodes/hk-cpu-1").status_code == 204
    assert not Node.objects.filter(name="hk-cpu-1").exists()
    deployment_reconcile(d)
    assert Replica.objects.get().node == node_us_cpu
    placement = owner_client.get("/api/v1/deployments/colours").json()["placement"]
    assert placement["regions"] == {"us": 1} and placement["in_preferred_region"] is False
    assert placement["note"] == "preferred region hk has no usable node (no node there has joined): 1 in us"
