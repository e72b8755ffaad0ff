"""A deployment autoscaled down to zero replicas, through a real edge process: a request finding no
ready replica is held (not failed), the deployment is asked to wake with one Celery message in the
console's broker, and the request is answered once a replica is ready; with no replica in time the
edge answers 503 with Retry-After."""

from __future__ import annotations

import base64
import json
import threading
import time

import httpx
import pytest
from django.conf import settings

from contract.redis_keys import RedisKeys
from contract.wake import WAKE_TASK
from inference.credentials import runner_token
from inference.models import Deployment, Replica, ReplicaState
from inference.routes_publish import route_entry, routes_publish_all
from inference.runner import launch
from tests.support.edges import RED, Served, World, predict, start_edge
from tests.support.runners import REPO, runner_command

pytestmark = pytest.mark.django_db(transaction=True)


def wake_messages() -> list[list]:
    """The task messages waiting in the console's default Celery queue: each one's task and args."""
    from accounts import keycache

    queue = RedisKeys(settings.REDIS_PREFIX).celery_keyprefix() + "celery"
    found = []
    for raw in keycache.client().lrange(queue, 0, -1):
        message = json.loads(raw)
        args = json.loads(base64.b64decode(message["body"]))[0]
        found.append([message["headers"]["task"], args])
    return found


def test_a_request_at_zero_is_held_until_a_replica_is_ready_or_answered_503(world: World) -> None:
    d = world.deployment
    Replica.objects.filter(deployment=d).exclude(pk=world.replicas["hk-a"].pk).delete()
    Deployment.objects.filter(pk=d.pk).update(replicas=0, min_replicas=0, max_replicas=1)
    routes_publish_all()  # scaled to zero: no ready replica, requests are held
    entry = route_entry(Deployment.objects.get(pk=d.pk))
    assert entry.scales_from_zero and entry.replicas == ()
    replica = world.replicas["hk-a"]  # as the wake-up placed it: starting, not routed yet
    runner = launch.start(runner_command(world.folder), env=launch.runner_env(token=runner_token(replica.pk)),
                          cwd=REPO, log_path=world.logs / "runner-hk-a.log")  # fmt: skip
    world.runners["hk-a"] = runner
    impatient = start_edge("hk", world.logs / "edge-impatient.log", "--cold-start-timeout-s", "1")
    patient = start_edge("hk", world.logs / "edge-patient.log", "--cold-start-timeout-s", "30")
    world.edges.update(impatient=impatient, patient=patient)
    for process in (impatient, patient, runner):
        process.wait_ready(60)

    with httpx.Client(timeout=60) as client:
        started = time.monotonic()
        refused = predict(client, impatient, world.key, RED)
        assert time.monotonic() - started >= 1.0  # held for the timeout, not refused at once
        assert refused.status == 503 and refused.body["error"]["type"] == "unavailable"
        assert "starting from zero replicas" in refused.body["error"]["message"]
        assert wake_messages() == [[WAKE_TASK, ["colours"]]]  # one wake-up for the worker

        answers: list[Served] = []
        held = threading.Thread(target=lambda: answers.append(predict(client, patient, world.key, RED)))
        held.start()
        time.sleep(1.5)
        assert held.is_alive() and answers == []  # still held: no replica is ready yet
        Replica.objects.filter(pk=replica.pk).update(state=ReplicaState.READY, url=runner.url)
        routes_publish_all()  # as the heartbeat reporting it ready does
        held.join(30)
        assert len(answers) == 1, "the held request was never answered"
        served = answers[0]
        assert (served.status, served.by) == (200, f"hk/hk-cpu-1/r{replica.pk}")
        assert served.body["predictions"][0]["label"] == "red"
        # Both edges asked within a few seconds: the wake-up was sent once (SET NX), not per request.
        assert len(wake_messages()) == 1
