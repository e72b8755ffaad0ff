"""Regional edges in hk and us in front of real runner processes in both regions, their route tables
published by the console's publisher (``inference.routes_publish``) from real database rows.

hk requests are served in hk; with the hk replica stopped they fail over to us without a failed
request; when hk is back, traffic returns to it. A replica that stops answering (SIGSTOP) opens its
breaker and requests go elsewhere; 504 comes only when no replica is left.
"""

from __future__ import annotations

import signal

import httpx
import pytest

from contract.routes import SERVED_BY_HEADER
from tests.support.edges import RED, Load, World, predict, start_edge, start_edges, wait_for

pytestmark = pytest.mark.django_db(transaction=True)


def test_hk_is_served_in_hk_fails_over_to_us_without_errors_and_comes_back(world: World) -> None:
    world.start_runners("hk-a", "us-a")
    start_edges(world)
    hk, us = world.edges["hk"], world.edges["us"]
    with httpx.Client(timeout=30) as client:
        for _ in range(5):
            at_hk, at_us = predict(client, hk, world.key, RED), predict(client, us, world.key, RED)
            assert (at_hk.status, at_hk.region, at_us.status, at_us.region) == (200, "hk", 200, "us")
            assert at_hk.body["predictions"][0]["label"] == "red"
        assert at_hk.by == f"hk/hk-cpu-1/r{world.replicas['hk-a'].pk}"
        asked = predict(client, hk, world.key, RED, **{"X-Lantau-Region": "us"})
        assert (asked.status, asked.region) == (200, "us")

        with Load(hk, world.key) as load:
            wait_for(lambda: len(load.answers) >= 5)
            world.runners["hk-a"].stop(10)  # hk's only replica goes away under load...
            wait_for(lambda: load.answers[-1].region == "us")
            world.fail("hk-a")  # ...and its agent reports it failed
            count = len(load.answers)
            wait_for(lambda: len(load.answers) >= count + 5)
        assert [a.status for a in load.answers if a.status != 200] == []  # nothing failed
        assert {a.region for a in load.answers[-5:]} == {"us"}

        world.start_runners("hk-b")  # hk is back
        wait_for(lambda: predict(client, hk, world.key, RED).region == "hk")
        back = [predict(client, hk, world.key, RED) for _ in range(5)]
        assert {(a.status, a.by) for a in back} == {(200, f"hk/hk-cpu-1/r{world.replicas['hk-b'].pk}")}
        assert predict(client, us, world.key, RED).region == "us"  # us's own traffic never left


def test_a_stalled_replica_opens_its_breaker_and_504_comes_only_when_none_is_left(world: World) -> None:
    world.start_runners("hk-a", "hk-b")
    world.edges["hk"] = start_edge("hk", world.logs / "edge-hk.log", "--timeout-s", "1",
                                   "--breaker-failures", "2", "--breaker-open-s", "60")  # fmt: skip
    edge = world.edges["hk"]
    edge.wait_ready(60)
    a, b = (world.replicas[n].pk for n in ("hk-a", "hk-b"))
    world.runners["hk-a"].process.send_signal(signal.SIGSTOP)  # accepts connections, never answers
    with httpx.Client(timeout=30) as client:
        answers = [predict(client, edge, world.key, RED) for _ in range(6)]
        assert {(s.status, s.by) for s in answers} == {(200, f"hk/hk-cpu-1/r{b}")}  # retried on hk-b
        log = edge.last_output(100_000)
        assert f"breaker of replica r{a} opened" in log and f"breaker of replica r{b}" not in log

        world.runners["hk-b"].process.send_signal(signal.SIGSTOP)  # now nothing answers
        answer = client.post(f"{edge.url}/v1/deployments/colours/predict", content=RED,
                             headers={"Authorization": f"Bearer {world.key}", "Content-Type": "image/jpeg"})  # fmt: skip
        assert answer.status_code == 504 and answer.headers["retry-after"] == "2"
        assert answer.json()["error"]["type"] == "upstream_timeout"
        assert SERVED_BY_HEADER not in answer.headers
