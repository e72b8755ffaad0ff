"""Rollouts followed by the reconciler: recorded, finished, and rolled back by themselves when the new
replicas fail or never become ready, the old replicas serving all along (rows; states as agents report)."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from django.utils import timezone

from accounts.models import AuditEvent
from inference.models import Deployment, Replica
from inference.services.deployments import deployment_reconcile

pytestmark = pytest.mark.django_db


def patch(client, body: dict):
    return client.patch("/api/v1/deployments/colours", body, content_type="application/json")


def show(client) -> dict:
    return client.get("/api/v1/deployments/colours").json()


def report(replicas, state: str, error: str = "") -> None:
    """As the node agent reports them in a heartbeat."""
    for r in replicas:
        Replica.objects.filter(pk=r.pk).update(
            state=state, error=error, url=f"http://127.0.0.1:{20000 + r.pk}"
        )


def rows() -> list[tuple[int, str]]:
    return sorted(Replica.objects.values_list("model_version__number", "state"))


def test_a_version_change_is_recorded_as_a_rollout_and_ends_done(no_bake, owner_client, colours, new_version):
    v2 = new_version()
    changed = patch(owner_client, {"model_version_id": v2.pk})
    assert changed.status_code == 200
    rollout = changed.json()["rollout"]
    assert (rollout["state"], rollout["from"]["model_version"], rollout["to"]["model_version"]) == (
        "in_progress", "colours:1", "colours:2")  # fmt: skip
    for _ in range(3):
        deployment_reconcile(colours.pk)
        report(Replica.objects.filter(model_version=v2), "ready")
    deployment_reconcile(colours.pk)
    body = show(owner_client)
    assert body["rollout"]["state"] == "done" and body["rollout"]["finished_at"]
    assert rows() == [(2, "ready"), (2, "ready")]


def test_the_rollout_is_done_in_the_pass_that_retires_the_last_old_replica(
    no_bake, owner_client, colours, new_version
):
    """Not at the next periodic pass, 15 s later: nothing else would wake the reconciler then."""
    v2 = new_version()
    patch(owner_client, {"model_version_id": v2.pk})
    for _ in range(4):
        result = deployment_reconcile(colours.pk)
        if not Replica.objects.exclude(model_version=v2).exists():
            break
        assert show(owner_client)["rollout"]["state"] == "in_progress"
        report(Replica.objects.filter(model_version=v2), "ready")
    assert result["removed"] == 1 and rows() == [(2, "ready"), (2, "ready")]
    assert show(owner_client)["rollout"]["state"] == "done"


def test_by_default_the_first_new_replica_bakes_beside_every_old_one(
    owner_client, colours, new_version, settings
):
    """``LANTAU_ROLLOUT_BAKE_S`` is on by default (60 s): the error-rate watch gets a window while the
    old version still serves all of its share."""
    assert settings.ROLLOUT_BAKE_S == 60
    v2 = new_version()
    patch(owner_client, {"model_version_id": v2.pk})
    deployment_reconcile(colours.pk)
    report(Replica.objects.filter(model_version=v2), "ready")
    for _ in range(2):
        deployment_reconcile(colours.pk)
    assert rows() == [
        (1, "ready"),
        (1, "ready"),
        (2, "ready"),
    ]  # baking: no old one retired, no second new one
    rollout = show(owner_client)["rollout"]
    first = datetime.fromisoformat(rollout["first_ready_at"]) - timedelta(seconds=61)
    Deployment.objects.filter(pk=colours.pk).update(rollout={**rollout, "first_ready_at": first.isoformat()})
    deployment_reconcile(colours.pk)  # baked: the rollover goes on
    assert rows() == [(1, "ready"), (2, "pending"), (2, "ready")]  # one old retired, the next new one placed


def test_a_new_replica_that_fails_rolls_back_and_the_old_ones_keep_serving(
    owner_client, colours, new_version
):
    old = set(Replica.objects.values_list("pk", flat=True))
    v2 = new_version()
    patch(owner_client, {"model_version_id": v2.pk})
    deployment_reconcile(colours.pk)
    assert rows() == [(1, "ready"), (1, "ready"), (2, "pending")]  # one new starts; both old serve
    error = (
        "lantau-runner: cannot load model model.onnx: Fatal error: lantau.test:Missing is not a registered op"
    )
    report(Replica.objects.filter(model_version=v2), "failed", error)
    result = deployment_reconcile(colours.pk)
    assert result["rolled_back"] is True and result["placed"] == 0
    assert set(Replica.objects.values_list("pk", flat=True)) == old  # the old ones, untouched, no new
    body = show(owner_client)
    assert body["model_version"] == "colours:1" and body["status"] == "ready"
    assert body["rollout"]["state"] == "rolled_back"
    assert (
        body["rollout"]["reason"].startswith("new replica r")
        and "cannot load model" in body["rollout"]["reason"]
    )
    event = AuditEvent.objects.get(action="deployment.rollback")
    assert event.actor is None and event.data["reason"] == body["rollout"]["reason"]
    assert (event.before["model_version"], event.after["model_version"]) == ("colours:2", "colours:1")
    assert deployment_reconcile(colours.pk)["placed"] == 0  # settled: nothing crash-loops
    page = owner_client.get("/deployments/colours/")
    assert b"rolled back" in page.content and b"cannot load model" in page.content


def test_a_rollout_with_no_new_replica_ready_in_time_rolls_back(owner_client, colours, new_version, settings):
    settings.ROLLOUT_READY_TIMEOUT_S = 30
    v2 = new_version()
    patch(owner_client, {"model_version_id": v2.pk})
    deployment_reconcile(colours.pk)
    report(
        Replica.objects.filter(model_version=v2), "starting", "restarting in 4.0 s: runner exited with code 1"
    )
    deployment_reconcile(colours.pk)
    assert show(owner_client)["rollout"]["state"] == "in_progress"  # within its time
    stale = (timezone.now() - timedelta(seconds=31)).isoformat()
    deployment = Deployment.objects.get(pk=colours.pk)
    Deployment.objects.filter(pk=colours.pk).update(rollout=deployment.rollout | {"progress_at": stale})
    deployment_reconcile(colours.pk)
    rollout = show(owner_client)["rollout"]
    assert rollout["state"] == "rolled_back"
    assert rollout["reason"].startswith("no new replica became ready within 30 s: r")
    assert "is starting (restarting in 4.0 s: runner exited with code 1)" in rollout["reason"]
    assert rows() == [(1, "ready"), (1, "ready")]


def test_a_settings_change_rolls_back_to_the_settings_before_it(owner_client, colours):
    patch(owner_client, {"max_batch_size": 16})
    deployment_reconcile(colours.pk)
    new = Replica.objects.exclude(spec=Replica.objects.order_by("pk").first().spec)
    report(new, "failed", "runner exited with code 1 (after 5 starts)")
    deployment_reconcile(colours.pk)
    body = show(owner_client)
    assert body["max_batch_size"] == 8 and body["rollout"]["state"] == "rolled_back"
    assert body["rollout"]["to"]["max_batch_size"] == 16 and len(body["replica_set"]) == 2


def test_a_second_change_during_a_rollout_rolls_back_to_the_settings_that_ran(
    owner_client, colours, new_version
):
    v2, v3 = new_version(), new_version()
    patch(owner_client, {"model_version_id": v2.pk})
    deployment_reconcile(colours.pk)
    patch(owner_client, {"model_version_id": v3.pk})
    deployment_reconcile(colours.pk)
    report(Replica.objects.filter(model_version=v3), "failed", "boom")
    deployment_reconcile(colours.pk)
    body = show(owner_client)
    assert body["model_version"] == "colours:1" and body["rollout"]["to"]["model_version"] == "colours:3"


def test_rolling_back_by_hand_after_a_rollout_and_only_once(
    no_bake, owner_client, colours, new_version, teammate, viewer
):
    from django.test import Client

    v2 = new_version()
    nothing = owner_client.post("/api/v1/deployments/colours/rollback")
    assert (
        nothing.status_code == 409
        and nothing.json()["error"]["message"] == "'colours' has no rollout to roll back"
    )
    patch(owner_client, {"model_version_id": v2.pk})
    for _ in range(3):
        deployment_reconcile(colours.pk)
        report(Replica.objects.filter(model_version=v2), "ready")
    deployment_reconcile(colours.pk)
    assert show(owner_client)["rollout"]["state"] == "done"
    as_viewer = Client()
    as_viewer.force_login(viewer)
    assert as_viewer.post("/api/v1/deployments/colours/rollback").status_code == 403
    back = owner_client.post("/api/v1/deployments/colours/rollback")
    assert back.status_code == 200, back.content
    assert back.json()["model_version"] == "colours:1"
    assert (back.json()["rollout"]["state"], back.json()["rollout"]["reason"]) == (
        "rolled_back",
        "rolled back by olivia",
    )
    deployment_reconcile(colours.pk)
    assert rows() == [
        (1, "pending"),
        (2, "ready"),
        (2, "ready"),
    ]  # the v2 replicas serve until v1's are ready
    again = owner_client.post("/api/v1/deployments/colours/rollback")
    assert again.status_code == 409
