"""Canaries: extra replicas of another version, marked in route entries with their share of requests,
which the edge's balancer follows; promote, abort, and an abort by itself when a canary replica fails."""

from __future__ import annotations

import random

import pytest

from accounts.models import AuditEvent
from contract.routes import RouteEntry, RouteReplica, edge_key_derive, route_open, route_sign
from contract.signing import signing_key_from_secret
from inference.edge.balancer import Balancer
from inference.models import Replica
from inference.routes_publish import route_entry
from inference.services.deployments import deployment_reconcile
from tests.support.summaries import sealed_summary

pytestmark = pytest.mark.django_db


def post(client, path: str, body: dict | None = None):
    return client.post(f"/api/v1/deployments/colours{path}", body or {}, content_type="application/json")


def report(replicas, state: str, error: str = "") -> None:
    for r in replicas:
        Replica.objects.filter(pk=r.pk).update(
            state=state, error=error, url=f"http://127.0.0.1:{20000 + r.pk}"
        )


def rows() -> list[tuple[int, str]]:
    return sorted(Replica.objects.values_list("model_version__number", "state"))


def test_a_canary_runs_extra_replicas_and_its_route_carries_the_share(owner_client, colours, new_version):
    v2 = new_version()
    started = post(owner_client, "/canary", {"model_version_id": v2.pk, "percent": 10})
    assert started.status_code == 200, started.content
    body = started.json()
    assert (body["canary_version"], body["canary_percent"], body["rollout"]["kind"]) == (
        "colours:2",
        10,
        "canary",
    )
    deployment_reconcile(colours.pk)
    assert rows() == [(1, "ready"), (1, "ready"), (2, "pending")]  # round(2 x 10%) -> at least one, on top
    report(Replica.objects.filter(model_version=v2), "ready")
    route = route_entry(colours.__class__.objects.get(pk=colours.pk))
    assert route.canary_percent == 10
    assert sorted(r.canary for r in route.replicas) == [False, False, True]
    figures = owner_client.get("/api/v1/deployments/colours").json()["canary"]
    assert (figures["canary"]["replicas"], figures["stable"]["replicas"]) == (1, 2)
    assert deployment_reconcile(colours.pk)["canary_placed"] == 0  # idempotent


def test_promoting_a_canary_rolls_the_deployment_onto_its_version(
    no_bake, owner_client, colours, new_version
):
    v2 = new_version()
    post(owner_client, "/canary", {"model_version_id": v2.pk, "percent": 20})
    deployment_reconcile(colours.pk)
    canary = Replica.objects.get(model_version=v2)
    report([canary], "ready")
    promoted = post(owner_client, "/canary/promote")
    assert promoted.status_code == 200
    body = promoted.json()
    assert (body["model_version"], body["canary_version"], body["canary_percent"]) == ("colours:2", None, 0)
    assert (body["rollout"]["kind"], body["rollout"]["from"]["model_version"]) == ("update", "colours:1")
    for _ in range(3):
        deployment_reconcile(colours.pk)
        report(Replica.objects.filter(model_version=v2), "ready")
    deployment_reconcile(colours.pk)
    assert rows() == [(2, "ready"), (2, "ready")]
    assert canary.pk in set(Replica.objects.values_list("pk", flat=True))  # adopted, not restarted
    assert owner_client.get("/api/v1/deployments/colours").json()["rollout"]["state"] == "done"


def test_aborting_a_canary_retires_its_replicas(owner_client, colours, new_version):
    v2 = new_version()
    post(owner_client, "/canary", {"model_version_id": v2.pk, "percent": 10})
    deployment_reconcile(colours.pk)
    aborted = post(owner_client, "/canary/abort")
    assert aborted.status_code == 200
    assert (aborted.json()["rollout"]["state"], aborted.json()["rollout"]["reason"]) == (
        "aborted",
        "aborted by olivia",
    )
    deployment_reconcile(colours.pk)
    assert rows() == [(1, "ready"), (1, "ready")]
    assert post(owner_client, "/canary/abort").json()["error"]["message"] == "'colours' runs no canary"


def test_a_failing_canary_replica_aborts_the_canary_by_itself(owner_client, colours, new_version):
    v2 = new_version()
    post(owner_client, "/canary", {"model_version_id": v2.pk, "percent": 10})
    deployment_reconcile(colours.pk)
    report(Replica.objects.filter(model_version=v2), "failed", "lantau-runner: cannot load model model.onnx")
    deployment_reconcile(colours.pk)
    body = owner_client.get("/api/v1/deployments/colours").json()
    assert body["canary_version"] is None and body["rollout"]["state"] == "aborted"
    assert "cannot load model" in body["rollout"]["reason"]
    assert rows() == [(1, "ready"), (1, "ready")]
    assert AuditEvent.objects.filter(action="deployment.canary_abort", actor=None).count() == 1


@pytest.mark.parametrize(
    "body, status, message",
    [
        ({"percent": 60}, 422, "canary_percent must be between 1 and 50"),
        ({"percent": 0}, 422, "canary_percent must be between 1 and 50"),
        ({"same": True, "percent": 10}, 422, "colours:1 is the version 'colours' runs already"),
    ],
)
def test_canary_requests_are_checked(owner_client, colours, new_version, body, status, message):
    version = colours.model_version if body.pop("same", False) else new_version()
    refused = post(owner_client, "/canary", {"model_version_id": version.pk, **body})
    assert (refused.status_code, refused.json()["error"]["message"]) == (status, message)
    assert owner_client.get("/api/v1/deployments/colours").json()["canary_version"] is None


def test_a_version_change_waits_for_the_canary_and_a_canary_for_the_rollout(
    owner_client, colours, new_version
):
    v2, v3 = new_version(), new_version()
    post(owner_client, "/canary", {"model_version_id": v2.pk, "percent": 10})
    refused = owner_client.patch("/api/v1/deployments/colours", {"model_version_id": v3.pk},
                                 content_type="application/json")  # fmt: skip
    assert refused.status_code == 409 and "promote or abort it" in refused.json()["error"]["message"]
    post(owner_client, "/canary/abort")
    owner_client.patch(
        "/api/v1/deployments/colours", {"model_version_id": v3.pk}, content_type="application/json"
    )
    busy = post(owner_client, "/canary", {"model_version_id": v2.pk, "percent": 10})
    assert busy.status_code == 409 and "is rolling out" in busy.json()["error"]["message"]


def test_the_balancer_sends_about_the_canary_share_to_canary_replicas() -> None:
    replicas = tuple(
        RouteReplica(i, f"http://127.0.0.1:{i}", "hk", "n", "t", canary=i == 3) for i in (1, 2, 3)
    )
    route = RouteEntry(
        "colours", 1, "image-classification", "colours:1", False, 0, replicas, canary_percent=10
    )
    balancer = Balancer("hk")
    random.seed(10)
    picks = [balancer.pick(route, set()) for _ in range(2000)]
    share = sum(1 for p in picks if p is not None and p.canary) / len(picks)
    assert 0.07 < share < 0.13
    without = RouteEntry("colours", 1, "image-classification", "colours:1", False, 0, replicas[2:], 10)
    assert balancer.pick(without, set()).id == 3  # only the canary is left: it serves every request
    assert balancer.pick(route, {3}).canary is False  # a retry takes any other replica


def test_route_entries_carry_the_canary_marks_and_none_without_a_canary() -> None:
    signer, key = signing_key_from_secret("s"), edge_key_derive("s")
    replicas = (RouteReplica(1, "http://127.0.0.1:1", "hk", "n", "t"),
                RouteReplica(2, "http://127.0.0.1:2", "hk", "n", "t", canary=True))  # fmt: skip
    entry = RouteEntry(
        "colours", 1, "image-classification", "colours:1", False, 0, replicas, canary_percent=25
    )
    opened = route_open(route_sign(signer, "p", entry, key), signer.public_key(), "p", "colours", key)
    assert (
        opened is not None
        and opened.canary_percent == 25
        and [r.canary for r in opened.replicas] == [False, True]
    )
    plain = RouteEntry("other", 1, "image-classification", "other:1", False, 0, replicas[:1])
    opened = route_open(route_sign(signer, "p", plain, key), signer.public_key(), "p", "other", key)
    assert opened is not None and opened.canary_percent == 0 and opened.replicas[0].canary is False


def test_the_deployment_page_shows_both_versions_figures_side_by_side(owner_client, colours, new_version):
    import redis
    from django.conf import settings

    from contract.redis_keys import RedisKeys

    v2 = new_version()
    post(owner_client, "/canary", {"model_version_id": v2.pk, "percent": 10})
    deployment_reconcile(colours.pk)
    report(Replica.objects.all(), "ready")
    names, client = RedisKeys(settings.REDIS_PREFIX), redis.Redis.from_url(settings.REDIS_URL)
    summaries = {}
    for replica in Replica.objects.all():  # the runners' last per-second summaries
        canary = replica.model_version_id == v2.pk
        summaries[names.metrics_last("colours", str(replica.pk))] = sealed_summary(
            "colours", replica.pk, requests=10, errors=5 if canary else 0, requests_per_s=10.0,
            latency_ms={"p50": 30.0 if canary else 12.0, "p95": 80.0 if canary else 20.0})  # fmt: skip
    client.mset(summaries)
    try:
        page = owner_client.get("/deployments/colours/").content.decode()
    finally:
        client.delete(*summaries)
    assert "Canary: 10% of requests to colours:2" in page and "console/canary.js" in page
    import re

    def row(side: str) -> list[str]:
        found = re.search(rf'<tr data-side="{side}">(.*?)</tr>', page, re.S)
        assert found is not None, side
        return [
            re.sub(r"\s+", " ", cell).strip()
            for cell in re.findall(r"<t[dh][^>]*>(.*?)</t[dh]>", found.group(1), re.S)
        ]

    assert row("stable") == ["stable", "colours:1", "2 / 2", "20.0", "0%", "12.0", "20.0"]
    assert row("canary") == ["canary", "colours:2", "1 / 1", "10.0", "50%", "30.0", "80.0"]
    owner_client.post("/api/v1/deployments/colours/canary/abort")
    assert 'id="canary-figures"' not in owner_client.get("/deployments/colours/").content.decode()
