"""Nodes' lifecycle through the API: cordon, uncordon, drain (replace first, then retire), remove."""

import pytest

from inference.models import Node, Replica
from inference.services.deployments import deployment_reconcile
from tests.support import hardware

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("install_admin")]  # Olivia runs the fleet


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


def where() -> list[tuple[str, str]]:
    return sorted(Replica.objects.values_list("node__name", "state"))


def ready_all() -> None:
    Replica.objects.update(state="ready", url="http://127.0.0.1:20001")


def failed_over(owner_client, colour_version, node_us_cpu, *, hk_room: int | None = 8, replicas: int = 2):
    """Deployment ``colours`` for hk, placed in us while hk had no usable node, ready there; then hk
    comes back (``hk_room`` replicas of room; None: no hk node at all)."""
    d = create(owner_client, colour_version, replicas=replicas, region="hk")
    deployment_reconcile(d)
    ready_all()
    assert where() == [("us-cpu-1", "ready")] * replicas
    if hk_room is not None:
        hardware.node("hk-cpu-1", "hk", max_replicas=hk_room)
    return d


def test_replicas_that_failed_over_go_home_when_the_region_is_back_and_none_stops_early(
    owner_client, colour_version, node_us_cpu
):
    d = failed_over(owner_client, colour_version, node_us_cpu)
    assert (
        "preferred region hk has no usable node"
        in owner_client.get("/api/v1/deployments/colours").json()["placement"]["note"]
    )
    steps = []
    for _ in range(5):  # one replacement at home at a time; each one away serves until it is ready
        deployment_reconcile(d)
        deployment_reconcile(d)  # the same answer on a second pass: nothing placed or removed twice
        steps.append(where())
        Replica.objects.filter(node__name="hk-cpu-1").update(state="ready", url="http://127.0.0.1:20002")
    assert steps == [
        [("hk-cpu-1", "pending"), ("us-cpu-1", "ready"), ("us-cpu-1", "ready")],
        [("hk-cpu-1", "pending"), ("hk-cpu-1", "ready"), ("us-cpu-1", "ready")],
        [("hk-cpu-1", "ready"), ("hk-cpu-1", "ready")],
        [("hk-cpu-1", "ready"), ("hk-cpu-1", "ready")],
        [("hk-cpu-1", "ready"), ("hk-cpu-1", "ready")],
    ]
    placement = owner_client.get("/api/v1/deployments/colours").json()["placement"]
    assert placement["in_preferred_region"] and placement["note"] == ""


def test_a_deployment_still_recovering_away_is_left_alone(owner_client, colour_version, node_us_cpu):
    d = failed_over(owner_client, colour_version, node_us_cpu)
    Replica.objects.filter(pk=Replica.objects.order_by("pk").last().pk).update(state="starting")
    deployment_reconcile(d)  # one replica away still starting: nothing moves yet
    assert where() == [("us-cpu-1", "ready"), ("us-cpu-1", "starting")]
    ready_all()
    deployment_reconcile(d)
    assert where() == [("hk-cpu-1", "pending"), ("us-cpu-1", "ready"), ("us-cpu-1", "ready")]


def test_only_as_many_go_home_as_home_can_take(owner_client, colour_version, node_us_cpu):
    d = failed_over(owner_client, colour_version, node_us_cpu, hk_room=1)
    for _ in range(2):
        deployment_reconcile(d)
        assert where() == [("hk-cpu-1", "pending"), ("us-cpu-1", "ready"), ("us-cpu-1", "ready")]
    Replica.objects.filter(node__name="hk-cpu-1").update(state="ready", url="http://127.0.0.1:20002")
    for _ in range(2):  # one away retired; the other stays away, and stays put
        deployment_reconcile(d)
        assert where() == [("hk-cpu-1", "ready"), ("us-cpu-1", "ready")]


def test_nothing_moves_while_home_has_no_usable_node(owner_client, colour_version, node_us_cpu):
    d = failed_over(owner_client, colour_version, node_us_cpu, hk_room=None)
    hardware.node("hk-cpu-down", "hk", status="offline")
    for _ in range(2):
        deployment_reconcile(d)
        assert where() == [("us-cpu-1", "ready")] * 2
