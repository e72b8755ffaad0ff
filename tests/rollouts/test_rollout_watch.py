"""Rollouts and canaries watched by their new replicas' error rate (summaries written to Redis in the
runners' format), and the bake: the first new replica serves beside the old ones before any retires."""

from __future__ import annotations

import secrets
import time
from datetime import timedelta

import pytest
from django.utils import timezone

from accounts import keycache
from contract.redis_keys import RedisKeys
from inference.models import Deployment, Replica
from inference.services.deployments import deployment_reconcile
from inference.services.rollout_watch import rollout_watch, rollouts_watch
from tests.support.summaries import sealed_summary

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def own_prefix(settings):
    settings.REDIS_PREFIX = f"watch-{secrets.token_hex(4)}"
    settings.ROLLOUT_MIN_REQUESTS, settings.ROLLOUT_MAX_ERROR_PERCENT = 20, 10
    yield
    stale = list(keycache.client().scan_iter(match=f"{settings.REDIS_PREFIX}:*"))
    if stale:
        keycache.client().delete(*stale)


def summary(settings, replica: Replica, *, ts: float, requests: int, errors: int) -> None:
    """What the replica's runner publishes every second (inference.runner.live), ``ts`` seconds from now."""
    body = {"ts": round(time.time() + ts - 3, 3), "requests": requests, "requests_per_s": requests,
            "errors": errors, "latency_ms": {"p50": 2.0, "p95": 3.0, "p99": 4.0}}  # fmt: skip
    keycache.client().set(
        RedisKeys(settings.REDIS_PREFIX).metrics_last("colours", str(replica.pk)),
        sealed_summary("colours", replica.pk, **body),
    )


def ready(replicas) -> None:
    for r in replicas:
        Replica.objects.filter(pk=r.pk).update(state="ready", url=f"http://127.0.0.1:{20000 + r.pk}")


def rows() -> list[tuple[int, str]]:
    return sorted(Replica.objects.values_list("model_version__number", "state"))


def roll_to(client, deployment: Deployment, version) -> Replica:
    """Start a rollout to ``version`` and report its first new replica ready."""
    client.patch(
        "/api/v1/deployments/colours", {"model_version_id": version.pk}, content_type="application/json"
    )
    deployment_reconcile(deployment.pk)
    new = Replica.objects.get(model_version=version)
    ready([new])
    return new


def test_new_replicas_answering_errors_roll_the_rollout_back(owner_client, colours, new_version, settings):
    settings.ROLLOUT_BAKE_S = 60
    old = set(Replica.objects.values_list("pk", flat=True))
    new = roll_to(owner_client, colours, new_version())
    deployment_reconcile(colours.pk)
    summary(settings, new, ts=1.0, requests=12, errors=1)
    assert rollout_watch(colours.pk) is None  # too few requests to judge
    assert rollout_watch(colours.pk) is None  # the same second, not counted twice
    summary(settings, new, ts=2.0, requests=18, errors=9)
    assert rollouts_watch() == 1
    assert (
        Deployment.objects.get(pk=colours.pk).rollout["reason"]
        == "the new replicas answered 10 of 30 sampled requests with errors (33%, above 10%)"
    )
    body = owner_client.get("/api/v1/deployments/colours").json()
    assert (body["model_version"], body["rollout"]["state"]) == ("colours:1", "rolled_back")
    deployment_reconcile(colours.pk)
    assert set(Replica.objects.values_list("pk", flat=True)) == old  # the old ones served throughout


def test_a_healthy_rollout_is_not_rolled_back(owner_client, colours, new_version, settings):
    new = roll_to(owner_client, colours, new_version())
    summary(settings, new, ts=1.0, requests=100, errors=5)  # 5%: under the limit
    assert rollout_watch(colours.pk) is None
    assert Deployment.objects.get(pk=colours.pk).rollout["state"] == "in_progress"


def test_a_canary_answering_errors_is_aborted(owner_client, colours, new_version, settings):
    v2 = new_version()
    owner_client.post("/api/v1/deployments/colours/canary", {"model_version_id": v2.pk, "percent": 10},
                      content_type="application/json")  # fmt: skip
    deployment_reconcile(colours.pk)
    canary = Replica.objects.get(model_version=v2)
    ready([canary])
    summary(settings, canary, ts=1.0, requests=25, errors=25)
    assert rollout_watch(colours.pk).startswith("the new replicas answered 25 of 25")
    body = owner_client.get("/api/v1/deployments/colours").json()
    assert (body["canary_version"], body["rollout"]["state"]) == (None, "aborted")


def test_with_a_bake_the_old_replicas_wait_for_the_first_new_one_to_prove_itself(
    owner_client, colours, new_version, settings
):
    settings.ROLLOUT_BAKE_S = 60
    roll_to(owner_client, colours, new_version())
    deployment_reconcile(colours.pk)
    deployment_reconcile(colours.pk)
    assert rows() == [(1, "ready"), (1, "ready"), (2, "ready")]  # both old serve, no second new yet
    rollout = Deployment.objects.get(pk=colours.pk).rollout
    baked = (timezone.now() - timedelta(seconds=61)).isoformat()
    Deployment.objects.filter(pk=colours.pk).update(rollout=rollout | {"first_ready_at": baked})
    deployment_reconcile(colours.pk)
    assert rows() == [(1, "ready"), (2, "pending"), (2, "ready")]  # one old retired, the next new one starts
