"""Autoscaling: bounds and target checked, replicas moved by the requests in flight read from the runners'
per-second summaries in Redis (written here in the runners' format), cool-downs, never past the bounds,
each change recorded with its reason."""

from __future__ import annotations

import secrets

import pytest

from accounts import keycache, keyhash
from accounts.models import AuditEvent
from contract.redis_keys import RedisKeys
from contract.routes import route_open
from inference.models import Deployment, Replica
from inference.routes_publish import edge_key, route_entry, routes_publish_all
from inference.services.autoscale import deployment_autoscale, deployment_wake, deployments_autoscale
from tests.support.summaries import sealed_summary

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def own_prefix(settings):
    settings.REDIS_PREFIX = f"autoscale-{secrets.token_hex(4)}"
    settings.AUTOSCALE_WINDOW_S = 30
    yield
    stale = list(keycache.client().scan_iter(match=f"{settings.REDIS_PREFIX}:*"))
    if stale:
        keycache.client().delete(*stale)


def put(client, **body):
    return client.put("/api/v1/deployments/colours/autoscaling", body, content_type="application/json")


def summaries(settings, *, requests_per_s: float, p50_ms: float) -> None:
    """What each ready replica's runner publishes every second (inference.runner.live)."""
    names = RedisKeys(settings.REDIS_PREFIX)
    for r in Replica.objects.filter(state="ready"):
        summary = sealed_summary("colours", r.pk, requests_per_s=requests_per_s, requests=int(requests_per_s),
                                 errors=0, latency_ms={"p50": p50_ms, "p95": p50_ms, "p99": p50_ms},
                                 queue_depth=0)  # fmt: skip
        keycache.client().set(names.metrics_last("colours", str(r.pk)), summary, ex=10)


@pytest.mark.parametrize(
    "body, message",
    [
        (
            {"min_replicas": 3, "max_replicas": 2},
            "min_replicas and max_replicas must satisfy 0 <= min <= max <= 32",
        ),
        (
            {"min_replicas": 0, "max_replicas": 0},
            "min_replicas must be between 1 and 32 without autoscaling (0 needs max_replicas)",
        ),
        ({"max_replicas": 33}, "min_replicas and max_replicas must satisfy 0 <= min <= max <= 32"),
        (
            {"min_replicas": 0, "max_replicas": 2, "scale_to_zero_after_s": 0},
            "scale_to_zero_after_s must be between 1 and 86400",
        ),
        (
            {"max_replicas": 2, "target_inflight_per_replica": 0},
            "target_inflight_per_replica must be between 0.1 and 10000",
        ),
        ({"max_replicas": 2, "scale_cooldown_s": -1}, "scale_cooldown_s must be between 0 and 86400"),
    ],
)
def test_autoscaling_settings_are_checked(owner_client, colours, body, message):
    refused = put(owner_client, **body)
    assert (refused.status_code, refused.json()["error"]["message"]) == (422, message)
    assert owner_client.get("/api/v1/deployments/colours").json()["autoscaling"]["enabled"] is False


def test_turning_autoscaling_on_brings_replicas_within_the_bounds(owner_client, colours):
    answer = put(owner_client, min_replicas=3, max_replicas=5)
    assert answer.status_code == 200, answer.content
    scaling = answer.json()["autoscaling"]
    assert answer.json()["replicas"] == 3 and scaling["enabled"] is True
    assert [(d["from"], d["to"], d["reason"]) for d in scaling["decisions"]] == [
        (2, 3, "2 replicas is outside the bounds 3-5")]  # fmt: skip
    page = owner_client.get("/deployments/colours/").content.decode()
    assert "Autoscaling 3-5 replicas" in page and "2 replicas is outside the bounds 3-5" in page
    off = put(owner_client, max_replicas=0)
    assert off.json()["autoscaling"]["enabled"] is False and deployments_autoscale() == 0


def test_load_scales_out_to_the_maximum_and_idleness_back_in(owner_client, colours, settings):
    put(owner_client, min_replicas=1, max_replicas=3, target_inflight_per_replica=2, scale_cooldown_s=10)
    summaries(settings, requests_per_s=100, p50_ms=50)  # 5 in flight on each of the two replicas
    t0 = 1_000_000.0
    out = deployment_autoscale(colours.pk, now=t0)
    assert out is not None and (out["from"], out["to"]) == (2, 3)  # 10 in flight wants 5: capped at 3
    assert (
        out["reason"]
        == "10.0 requests in flight on average over the last 30 s, for a target of 2 per replica"
    )
    assert deployment_autoscale(colours.pk, now=t0 + 1) is None  # cooling down
    assert deployment_autoscale(colours.pk, now=t0 + 11) is None  # never past the maximum
    summaries(settings, requests_per_s=0, p50_ms=0)
    assert deployment_autoscale(colours.pk, now=t0 + 20) is None  # the window still holds the burst
    back = deployment_autoscale(colours.pk, now=t0 + 45)
    assert back is not None and (back["from"], back["to"]) == (3, 1)
    assert (
        back["reason"] == "at most 0.0 requests in flight over the last 30 s, for a target of 2 per replica"
    )
    assert Deployment.objects.get(pk=colours.pk).replicas == 1
    shown = owner_client.get("/api/v1/deployments/colours").json()["autoscaling"]
    assert [(d["from"], d["to"]) for d in shown["decisions"]] == [(2, 3), (3, 1)] and shown["inflight"] == 0
    events = AuditEvent.objects.filter(action="deployment.autoscale").order_by("pk")
    assert [(e.before["replicas"], e.after["replicas"], e.actor) for e in events] == [
        (2, 3, None),
        (3, 1, None),
    ]


def test_no_summary_is_no_sample_and_no_decision(owner_client, colours):
    put(owner_client, min_replicas=1, max_replicas=3, target_inflight_per_replica=2, scale_cooldown_s=0)
    assert deployment_autoscale(colours.pk, now=1_000_000.0) is None  # runners silent: nothing made up
    assert Deployment.objects.get(pk=colours.pk).autoscale["samples"] == []


def published_route(settings, name: str = "colours"):
    names = RedisKeys(settings.REDIS_PREFIX)
    raw = keycache.client().hget(names.routes(), name)
    return route_open(raw, keyhash.signer().public_key(), names.prefix, name, edge_key())


def test_idleness_scales_to_zero_and_a_request_wakes_it(owner_client, colours, settings):
    answer = put(owner_client, min_replicas=0, max_replicas=2, target_inflight_per_replica=1,
                 scale_cooldown_s=0, scale_to_zero_after_s=60)  # fmt: skip
    assert answer.status_code == 200, answer.content
    assert answer.json()["autoscaling"]["scale_to_zero_after_s"] == 60
    summaries(settings, requests_per_s=10, p50_ms=100)  # 1 in flight on each replica: busy
    t0 = 1_000_000.0
    assert deployment_autoscale(colours.pk, now=t0) is None  # 2 in flight fit the 2 replicas
    summaries(settings, requests_per_s=0, p50_ms=0)
    inward = deployment_autoscale(colours.pk, now=t0 + 31)  # the window is quiet: in, but not to zero yet
    assert inward is not None and (inward["from"], inward["to"]) == (2, 1)
    assert deployment_autoscale(colours.pk, now=t0 + 59) is None  # 59 s without a request: not yet
    zero = deployment_autoscale(colours.pk, now=t0 + 61)
    assert zero is not None and (zero["from"], zero["to"]) == (1, 0)
    assert zero["reason"] == "no request for 61 s (scale to zero after 60 s idle)"
    deployment = Deployment.objects.get(pk=colours.pk)
    assert deployment.replicas == 0 and route_entry(deployment).scales_from_zero
    assert deployment_autoscale(colours.pk, now=t0 + 200) is None  # at zero it stays there
    shown = owner_client.get("/api/v1/deployments/colours").json()
    assert shown["status"] == "scaled to zero" and shown["autoscaling"]["scaled_to_zero"] is True
    page = owner_client.get("/deployments/colours/").content.decode()
    assert "to zero after 60 s without a request" in page and 'id="scaled-to-zero"' in page

    assert deployment_wake("colours", now=t0 + 300) is True  # what the worker runs for a held request
    assert deployment_wake("colours", now=t0 + 301) is False  # already waking: nothing more
    woke = Deployment.objects.get(pk=colours.pk)
    assert woke.replicas == 1
    assert woke.autoscale["decisions"][-1]["reason"] == "a request arrived while scaled to zero"
    assert deployment_autoscale(colours.pk, now=t0 + 330) is None  # just woken: busy, kept
    Replica.objects.update(state="starting")  # its runner still loading: no summary, not idle
    assert deployment_autoscale(colours.pk, now=t0 + 500) is None
    Replica.objects.update(state="ready")  # serving, but no request for 61 s: back to zero
    again = deployment_autoscale(colours.pk, now=t0 + 561)
    assert again is not None and (again["from"], again["to"]) == (1, 0)
    events = AuditEvent.objects.filter(action="deployment.autoscale").order_by("pk")
    assert [(e.before["replicas"], e.after["replicas"]) for e in events] == [(2, 1), (1, 0), (0, 1), (1, 0)]


def test_a_route_says_whether_requests_are_held_and_only_autoscaled_deployments_wake(
    owner_client, colours, settings, django_capture_on_commit_callbacks
):
    routes_publish_all()
    assert published_route(settings).scales_from_zero is False  # min 1: a request with no replica gets 503
    with django_capture_on_commit_callbacks(execute=True):
        put(owner_client, min_replicas=0, max_replicas=1, scale_to_zero_after_s=30)
    assert published_route(settings).scales_from_zero is True  # published with the new settings
    Deployment.objects.filter(pk=colours.pk).update(max_replicas=0, min_replicas=1, replicas=0)
    assert deployment_wake("colours") is False  # scaled to 0 by hand: stays so
    assert deployment_wake("no-such") is False
    Deployment.objects.filter(pk=colours.pk).update(max_replicas=1, min_replicas=0, desired_state="paused")
    assert deployment_wake("colours") is False  # paused: a request does not resume it
    assert Deployment.objects.get(pk=colours.pk).replicas == 0
