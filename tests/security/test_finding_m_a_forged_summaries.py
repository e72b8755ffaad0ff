"""Review finding M-A (runner summaries): whoever can write Redis plants ``<p>:metrics:last:<dep>:<rid>``.

Forged summaries are planted in the real Redis (under this test's own prefix) for a deployment of team
acme, beside real-looking ones for a deployment of team globex; the rollout watch and the autoscaler run
as celery beat runs them, against the real database. Garbage (a string for a count, NaN, Infinity,
negative or huge values, more errors than requests, a summary naming another deployment or replica, a
key of no replica) changes nothing of acme's deployment, and never stops the watch or the scaling of
globex's.
"""

from __future__ import annotations

import json
import logging
import re
import secrets
import time
from pathlib import Path

import pytest
from django.test import Client

from accounts import keycache
from contract.redis_keys import RedisKeys
from contract.summaries import summary_seal
from inference.credentials import runner_token
from inference.models import Deployment, Replica
from inference.services.autoscale import deployment_autoscaling_set, deployments_autoscale
from inference.services.deployments import DeploymentSpec, deployment_create, deployment_reconcile
from inference.services.registry import UploadedModel, model_version_upload
from inference.services.rollout_watch import rollouts_watch
from inference.summaries import latest_summaries
from tests.support import hardware, people
from tests.support.tiny_models import COLOURS, colour_classifier

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def own_prefix(settings):
    settings.REDIS_PREFIX = f"m-a-{secrets.token_hex(4)}"
    settings.ROLLOUT_MIN_REQUESTS, settings.ROLLOUT_MAX_ERROR_PERCENT = 20, 10
    settings.ROLLOUT_BAKE_S = 60
    yield
    stale = list(keycache.client().scan_iter(match=f"{settings.REDIS_PREFIX}:*"))
    if stale:
        keycache.client().delete(*stale)


class Team:
    """A team's owner, a client logged in as them, and a way to add versions of their model."""

    def __init__(self, owner, model: str, folder: Path) -> None:
        self.owner, self.model, self.folder, self.size = owner, model, folder, 8
        self.team = owner.memberships.get().team
        self.client = Client()
        self.client.force_login(owner)

    def version(self):
        self.size += 1
        path = colour_classifier(self.folder / f"{self.model}-{self.size}.onnx", size=self.size)
        upload = UploadedModel(name=self.model, task="image-classification", model_chunks=[path.read_bytes()],
                               labels_text="\n".join(COLOURS))  # fmt: skip
        return model_version_upload(team=self.team, actor=self.owner, upload=upload)

    def deploy(self, name: str) -> Deployment:
        spec = DeploymentSpec(name=name, model_version_id=self.version().pk)
        deployment = deployment_create(team=self.team, actor=self.owner, spec=spec)
        deployment_reconcile(deployment.pk)
        ready(deployment)
        return Deployment.objects.get(pk=deployment.pk)

    def roll(self, deployment: Deployment) -> Replica:
        """Start a rollout to a new version; its first new replica, ready."""
        answer = self.client.patch(f"/api/v1/deployments/{deployment.name}",
                                   {"model_version_id": self.version().pk}, content_type="application/json")  # fmt: skip
        assert answer.status_code == 200, answer.content
        deployment_reconcile(deployment.pk)
        new = Replica.objects.get(deployment=deployment, model_version__number=2)
        ready(deployment)
        return new


def ready(deployment: Deployment) -> None:
    for r in Replica.objects.filter(deployment=deployment):
        Replica.objects.filter(pk=r.pk).update(state="ready", url=f"http://127.0.0.1:{20000 + r.pk}")


@pytest.fixture
def teams(db, tmp_path):
    hardware.node_hk_cpu()
    return Team(people.owner(), "acme-model", tmp_path), Team(people.outsider(), "globex-model", tmp_path)


def recent(ts: object) -> object:
    """A test's time stamp 1..300 as a time of the last minute (order kept), which sealed summaries need."""
    if isinstance(ts, int | float) and not isinstance(ts, bool) and 0 < ts <= 300:
        return round(time.time() - 40 + ts / 10, 3)
    return ts


def plant(settings, deployment: str, replica: int | str, body: object, *, seal: bool = True) -> None:
    """``body`` at the replica's summary key, sealed with that replica's runner token as a host that runs
    the replica could (the bounds below are what stops it), or unsealed as anyone with Redis write."""
    if isinstance(body, dict):
        body = {"deployment": deployment, "replica": str(replica), "ts": 300} | body  # a runner names them
        raw = json.dumps(body | {"ts": recent(body["ts"])})
    else:
        raw = re.sub(r'"ts": (\d+)([,}])', lambda m: f'"ts": {recent(int(m[1]))}{m[2]}', str(body))
    if seal:
        raw = summary_seal(raw, token=runner_token(int(replica)), prefix=settings.REDIS_PREFIX,
                           deployment=deployment, replica=str(replica))  # fmt: skip
    keycache.client().set(RedisKeys(settings.REDIS_PREFIX).metrics_last(deployment, str(replica)), raw, ex=60)


def genuine(deployment: str, replica: int, *, ts: float, requests: int, errors: int, rate: float = 10.0,
            p50: float = 20.0) -> dict:  # fmt: skip
    """What a runner publishes (``inference.runner.live``)."""
    return {"deployment": deployment, "model_version": f"{deployment}:2", "replica": str(replica), "ts": ts,
            "window_s": 1.0, "requests": requests, "requests_per_s": rate, "errors": errors, "throttled": 0,
            "latency_ms": {"p50": p50, "p95": p50, "p99": p50}, "mean_batch_size": 1.0, "queue_depth": 0}  # fmt: skip


def forgeries(deployment: str, replica: int) -> list[object]:
    """Summaries no runner writes: each must be ignored whole."""
    name, rid = deployment, str(replica)
    return [
        {"ts": 1, "requests": "x", "errors": 1000},
        {"ts": 2, "requests": 1e30, "errors": 1e30},  # floats, and past any bound
        {"ts": 3, "requests": 10**12, "errors": 10**12},
        {"ts": 4, "requests": 100, "errors": 5000},  # more errors than requests
        {"ts": 5, "requests": -1000, "errors": -1},
        '{"ts": 6, "requests": 100, "errors": NaN}',
        '{"ts": 7, "requests": 100, "errors": 100, "requests_per_s": Infinity}',
        '{"ts": 1e400, "requests": 100, "errors": 100}',
        {"ts": 9, "requests": [100], "errors": {"n": 100}},
        {"ts": 10, "requests": True, "errors": True},
        {"ts": "eleven", "requests": 100, "errors": 100},
        {"ts": 12, "deployment": "someone-else", "replica": rid, "requests": 100, "errors": 100},
        {"ts": 13, "deployment": name, "replica": "999999", "requests": 100, "errors": 100},
        {"ts": 14, "requests": 100, "errors": 100, "latency_ms": "fast"},
        {"ts": 15, "requests": 100, "errors": 100, "latency_ms": {"p50": -5}},
        '{"ts": 16, "requests": 100, "errors": 100' + ', "x": [' * 5000 + "]" * 5000 + "}",  # deep nesting
        "[1, 2, 3]",
        "not json at all",
    ]


def test_m_a_garbage_summaries_never_stop_the_rollout_watch_of_other_teams(settings, teams, caplog) -> None:
    acme, globex = teams
    victim = acme.deploy("acme-app")  # watched first: its rows come first
    bystander = globex.deploy("globex-app")
    victim_new, bystander_new = acme.roll(victim), globex.roll(bystander)
    assert victim.pk < bystander.pk
    caplog.set_level(logging.WARNING, logger="lantau.summaries")

    for forged in forgeries(victim.name, victim_new.pk):
        plant(settings, victim.name, victim_new.pk, forged)
        plant(settings, victim.name, 999_999, genuine(victim.name, 999_999, ts=1, requests=500, errors=500))
        assert rollouts_watch() == 2
        rollout = Deployment.objects.get(pk=victim.pk).rollout
        assert rollout["state"] == "in_progress", (forged, rollout)
        assert (rollout["watch"]["requests"], rollout["watch"]["errors"]) == (0, 0), forged
    assert "ignoring the live summary of replica" in caplog.text

    # globex's rollout is still watched, while acme's garbage stays planted: its errors roll it back.
    plant(settings, bystander.name, bystander_new.pk,
          genuine(bystander.name, bystander_new.pk, ts=100.0, requests=40, errors=30))  # fmt: skip
    assert rollouts_watch() == 2
    assert Deployment.objects.get(pk=bystander.pk).rollout["state"] == "rolled_back"
    assert Deployment.objects.get(pk=victim.pk).rollout["state"] == "in_progress"

    # A genuine summary of acme's new replica still counts.
    plant(
        settings,
        victim.name,
        victim_new.pk,
        genuine(victim.name, victim_new.pk, ts=200.0, requests=30, errors=1),
    )
    rollouts_watch()
    assert Deployment.objects.get(pk=victim.pk).rollout["watch"]["requests"] == 30


def test_m_a_a_rollout_watch_that_fails_for_one_deployment_goes_on_with_the_others(
    settings, teams, caplog
) -> None:
    """Whatever raises for one deployment (here its stored watch counts, garbled) is logged, not fatal."""
    acme, globex = teams
    victim, bystander = acme.deploy("acme-app"), globex.deploy("globex-app")
    acme.roll(victim)
    bystander_new = globex.roll(bystander)
    rollout = Deployment.objects.get(pk=victim.pk).rollout
    Deployment.objects.filter(pk=victim.pk).update(rollout=rollout | {"watch": {"requests": "garbled"}})
    plant(settings, bystander.name, bystander_new.pk,
          genuine(bystander.name, bystander_new.pk, ts=100.0, requests=40, errors=30))  # fmt: skip
    caplog.set_level(logging.ERROR, logger="lantau.rollouts")
    assert rollouts_watch() == 2
    assert Deployment.objects.get(pk=bystander.pk).rollout["state"] == "rolled_back"
    assert f"watching the rollout of deployment {victim.pk} failed" in caplog.text


def test_m_a_garbage_summaries_scale_nothing_and_other_teams_still_scale(settings, teams) -> None:
    acme, globex = teams
    victim, bystander = acme.deploy("acme-app"), globex.deploy("globex-app")
    for team, deployment in ((acme, victim), (globex, bystander)):
        deployment_autoscaling_set(team=team.team, actor=team.owner, deployment=deployment, min_replicas=1,
                                   max_replicas=5, target_inflight_per_replica=1.0, scale_cooldown_s=0)  # fmt: skip
    (victim_replica,) = Replica.objects.filter(deployment=victim)
    (bystander_replica,) = Replica.objects.filter(deployment=bystander)
    rid = victim_replica.pk
    floods = [
        {"requests_per_s": 1e12, "latency_ms": {"p50": 2000}},  # past the bound
        {"requests_per_s": "x", "latency_ms": {"p50": 2000}},
        {"requests_per_s": 5000, "latency_ms": {"p50": 1e12}},
        '{"requests_per_s": Infinity, "latency_ms": {"p50": 2000}}',
        '{"requests_per_s": 5000, "latency_ms": {"p50": NaN}}',
        {"requests_per_s": -5000, "latency_ms": {"p50": -2000}},
        {"requests_per_s": 5000, "latency_ms": [2000]},
        {"requests_per_s": [5000], "latency_ms": {"p50": 2000}},
        {
            "deployment": "globex-app",
            "replica": str(rid),
            "requests_per_s": 5000,
            "latency_ms": {"p50": 2000},
        },
        {"deployment": victim.name, "replica": "999999", "requests_per_s": 5000, "latency_ms": {"p50": 2000}},
        {"requests": "many", "requests_per_s": 5000, "latency_ms": {"p50": 2000}},
        {"queue_depth": -1, "requests_per_s": 5000, "latency_ms": {"p50": 2000}},
    ]
    for forged in floods:
        plant(settings, victim.name, rid, forged)
        plant(
            settings, victim.name, 999_999, {"requests_per_s": 5000, "latency_ms": {"p50": 2000}}
        )  # no replica
        assert deployments_autoscale() == 2
        assert Deployment.objects.get(pk=victim.pk).replicas == 1, forged
        assert latest_summaries(victim.name, [rid]) == {}, forged
    assert not (Deployment.objects.get(pk=victim.pk).autoscale or {}).get("decisions")

    # globex's genuine load (5 requests in flight on its one replica) still scales it out.
    plant(settings, bystander.name, bystander_replica.pk,
          genuine(bystander.name, bystander_replica.pk, ts=1.0, requests=100, errors=0, rate=100.0, p50=50.0))  # fmt: skip
    assert deployments_autoscale() == 2
    assert Deployment.objects.get(pk=bystander.pk).replicas == 5
    assert Deployment.objects.get(pk=victim.pk).replicas == 1


def test_m_a_a_genuine_summary_is_kept_with_only_its_checked_fields(settings, teams) -> None:
    acme, _ = teams
    deployment = acme.deploy("acme-app")
    (replica,) = Replica.objects.filter(deployment=deployment)
    body = genuine(deployment.name, replica.pk, ts=5.0, requests=12, errors=2) | {"extra": "x" * 1000}
    plant(settings, deployment.name, replica.pk, body)
    found = latest_summaries(deployment.name, [replica.pk])[replica.pk]
    assert found["requests"] == 12 and found["errors"] == 2 and found["latency_ms"]["p50"] == 20.0
    assert "extra" not in found
    plant(settings, deployment.name, replica.pk, "x" * (70 * 1024))  # larger than any summary
    assert latest_summaries(deployment.name, [replica.pk]) == {}


def test_m_a_summaries_not_sealed_by_the_replica_steer_nothing(settings, teams, caplog) -> None:
    """What anyone with Redis write plants (no seal, another replica's seal, another install's, a stale
    one) moves no rollout and no scaling; the same figures sealed by the replica's runner token do."""
    acme, _ = teams
    victim = acme.deploy("acme-app")
    deployment_autoscaling_set(team=acme.team, actor=acme.owner, deployment=victim, min_replicas=1,
                               max_replicas=5, target_inflight_per_replica=1.0, scale_cooldown_s=0)  # fmt: skip
    (replica,) = Replica.objects.filter(deployment=victim)
    load = genuine(victim.name, replica.pk, ts=100.0, requests=100, errors=0, rate=100.0, p50=50.0)
    body = json.dumps(load | {"ts": time.time()})
    names = RedisKeys(settings.REDIS_PREFIX)
    stale = json.dumps(load | {"ts": time.time() - 120})
    caplog.set_level(logging.WARNING, logger="lantau.summaries")
    for raw, why in [
        (body, "not a sealed summary"),
        (summary_seal(body, token=runner_token(replica.pk + 1), prefix=settings.REDIS_PREFIX,
                      deployment=victim.name, replica=str(replica.pk)), "its seal is not the replica's"),
        (summary_seal(body, token=runner_token(replica.pk), prefix="another-install",
                      deployment=victim.name, replica=str(replica.pk)), "its seal is not the replica's"),
        (summary_seal(stale, token=runner_token(replica.pk), prefix=settings.REDIS_PREFIX,
                      deployment=victim.name, replica=str(replica.pk)), "120 s old"),
        (json.dumps({"body": body, "sig": "0" * 64}), "its seal is not the replica's"),
        (json.dumps({"body": body, "sig": "0" * 64, "extra": 1}), "not a sealed summary"),
    ]:  # fmt: skip
        keycache.client().set(names.metrics_last(victim.name, str(replica.pk)), raw, ex=60)
        assert latest_summaries(victim.name, [replica.pk]) == {}, why
        assert deployments_autoscale() == 1
        assert Deployment.objects.get(pk=victim.pk).replicas == 1, why
        assert why in caplog.text
    plant(settings, victim.name, replica.pk, load)  # sealed with the replica's own token
    assert latest_summaries(victim.name, [replica.pk])[replica.pk]["requests"] == 100
    assert deployments_autoscale() == 1
    assert Deployment.objects.get(pk=victim.pk).replicas == 5
