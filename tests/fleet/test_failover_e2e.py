"""The fleet end to end: one console (with its worker) and three node agents on 127.0.0.1, two in hk and
one in us, all real processes with real runners, while a load loop sends requests through the console's
``/v1/`` all along.

* Restarting the console, the worker and an hk agent (SIGKILL: its runners live on) leaves the
  deployment serving with its desired state intact; the new agent adopts its runner (same process).
* SIGKILL an hk agent with its runners: requests keep succeeding on the other hk replica, the node
  turns not ready within the configured window and a replacement starts on the other hk node.
* SIGKILL the other hk agent (+ runners): traffic fails over to us.
* Restart the hk agents: they are reconciled, with exactly one runner process per replica placed on them,
  and the replicas move home to hk with no failed request.
* Drain an hk node under load: its replica moves to the other hk node first, with no failed request.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import httpx
import pytest

from tests.support.factories import image_bytes
from tests.support.stack import Stack, runner_pids
from tests.support.tiny_models import COLOURS, colour_classifier

pytestmark = pytest.mark.e2e

OFFLINE_AFTER_S = 4  # LANTAU_NODE_OFFLINE_AFTER_S for this stack
SWEEP_S = 1  # LANTAU_NODE_SWEEP_S
NODES = {"hk-a": "hk", "hk-b": "hk", "us-a": "us"}


@dataclass
class LoadLoop:
    """Sequential requests through the console's gateway from a thread: each outcome is kept in order."""

    stack: Stack
    key: str
    outcomes: list[tuple[float, int]] = field(default_factory=list)  # (monotonic time, status; 0 = no answer)
    stop: threading.Event = field(default_factory=threading.Event)
    errors: list[tuple[float, str]] = field(default_factory=list)  # failed answers' bodies, for messages

    def run(self) -> None:
        body = image_bytes((250, 10, 10))
        with self.stack.client(self.key) as client:
            while not self.stop.is_set() and len(self.outcomes) < 20_000:  # bounded
                try:
                    answer = client.post("/v1/deployments/colours/predict", content=body,
                                         headers={"Content-Type": "image/jpeg"}, timeout=10)  # fmt: skip
                    ok = answer.status_code == 200 and answer.json()["predictions"][0]["label"] == "red"
                    status = answer.status_code if ok or answer.status_code != 200 else 299
                    if not ok:
                        served = answer.headers.get("x-lantau-served-by")
                        self.errors.append(
                            (time.monotonic(), f"{answer.status_code} {served} {answer.text[:200]}")
                        )
                except httpx.HTTPError as exc:
                    status = 0
                    self.errors.append((time.monotonic(), f"no answer: {exc}"))
                self.outcomes.append((time.monotonic(), status))
                time.sleep(0.02)

    def errors_since(self, start: float) -> list[str]:
        return [text for at, text in list(self.errors) if at >= start][:5]

    def since(self, start: float) -> list[int]:
        return [status for at, status in list(self.outcomes) if at >= start]

    def failures_since(self, start: float, until: float | None = None) -> list[int]:
        return [
            s for at, s in list(self.outcomes) if at >= start and (until is None or at < until) and s != 200
        ]


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    stack = Stack(tmp_path_factory.mktemp("fleet"))
    stack.env |= {"LANTAU_NODE_OFFLINE_AFTER_S": str(OFFLINE_AFTER_S), "LANTAU_NODE_SWEEP_S": str(SWEEP_S)}
    try:
        stack.start()
        stack.start_node("hk-a", "hk", labels={"tier": "edge"})
        stack.start_node("hk-b", "hk", labels={"tier": "edge"}, join=True)  # joins with a join token
        stack.start_node("us-a", "us")
        stack.user("fleet-owner", "fleet", "owner")
        stack.manage("install_admin", "--grant", "fleet-owner")  # the drain test drains a shared node
        keys = {
            "manage": stack.api_key("fleet-owner", "manage"),
            "infer": stack.api_key("fleet-owner", "inference"),
        }
        model = colour_classifier(stack.workdir / "colours.onnx")
        with stack.client(keys["manage"]) as api:
            wait_for(lambda: {n["name"] for n in api.get("/api/v1/nodes").json() if n["status"] == "online"}
                     == set(NODES), "all three nodes ready", api)  # fmt: skip
            upload = api.post(
                "/api/v1/models",
                files={"file": ("colours.onnx", model.read_bytes(), "application/octet-stream")},
                data={"name": "colours", "task": "image-classification", "labels": "\n".join(COLOURS),
                      "preprocessing": '{"mean": [0, 0, 0], "std": [1, 1, 1]}'},
            )  # fmt: skip
            assert upload.status_code == 201, upload.text
            created = api.post("/api/v1/deployments", json={
                "name": "colours", "model_version_id": upload.json()["id"], "replicas": 2, "region": "hk",
                "max_batch_size": 4, "max_queue_delay_ms": 2,
            })  # fmt: skip
            assert created.status_code == 201, created.text
            wait_for(
                lambda: ready_on(api) == {"hk-a": 1, "hk-b": 1}, "one ready replica on each hk node", api
            )
        load = LoadLoop(stack, keys["infer"])
        thread = threading.Thread(target=load.run, name="load", daemon=True)
        thread.start()
        yield {"stack": stack, "keys": keys, "load": load}
        load.stop.set()
        thread.join(15)
    finally:
        stack.stop()


def deployment(api: httpx.Client) -> dict:
    return api.get("/api/v1/deployments/colours").json()


def ready_on(api: httpx.Client) -> dict[str, int]:
    counts: dict[str, int] = {}
    for replica in deployment(api).get("replica_set", []):
        if replica["state"] == "ready":
            counts[replica["node"]] = counts.get(replica["node"], 0) + 1
    return counts


def node_status(api: httpx.Client, name: str) -> str:
    return next(n["status"] for n in api.get("/api/v1/nodes").json() if n["name"] == name)


def wait_for(check: Callable[[], object], what: str, api: httpx.Client, timeout: float = 60) -> float:
    """Poll ``check`` until true; the seconds it took. Fails with the deployment's state otherwise."""
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        try:
            if check():
                return time.monotonic() - start
        except (httpx.HTTPError, KeyError, StopIteration, ValueError):
            pass
        time.sleep(0.2)
    raise AssertionError(f"not {what} after {timeout} s: {deployment(api)}")


def runners_match_placement(stack: Stack, api: httpx.Client) -> bool:
    """Every node runs exactly one runner process per replica placed on it (no duplicate, no orphan)."""
    placed: dict[str, int] = {}
    for replica in deployment(api)["replica_set"]:
        placed[replica["node"]] = placed.get(replica["node"], 0) + 1
    return all(len(runner_pids(stack.node_dir(name))) == placed.get(name, 0) for name in NODES)


def test_restarting_console_worker_and_an_agent_keeps_every_deployment_serving(fleet) -> None:
    stack, load = fleet["stack"], fleet["load"]
    with stack.client(fleet["keys"]["manage"]) as api:
        wait_for(lambda: len(load.since(0)) > 5, "serving", api)
        before = deployment(api)
        runners_before = runner_pids(stack.node_dir("hk-a"))
        assert len(runners_before) == 1
        # hk-b joined with a join token: its credential is in its data dir, and it rotates when asked.
        credential = stack.node_dir("hk-b") / "node-token"
        joined = credential.read_text()
        assert joined.startswith("ltn_") and credential.stat().st_mode & 0o777 == 0o600
        stack.rotate_credential("hk-b")
        wait_for(lambda: credential.read_text() != joined, "hk-b's credential rotated", api)
        assert credential.stat().st_mode & 0o777 == 0o600
        rotated = time.time()
        wait_for(lambda: stack.agent_state("hk-b")["heartbeat_at"] > rotated + 1, "hk-b beating with it", api)
        start = time.monotonic()
        stack.kill_node("hk-a", runners=False)  # SIGKILL the agent alone: its runner keeps serving
        stack.kill("console")
        stack.kill("worker")
        stack.start_console()
        stack.start_worker()
        stack.restart_node("hk-a")
        agent = stack.procs["node-hk-a"].pid

        def adopted() -> bool:  # the new agent heartbeated and took the old runner over
            state = stack.agent_state("hk-a")
            replicas = state.get("replicas", [])
            return (
                state.get("pid") == agent
                and state.get("heartbeat_at") is not None
                and [(r["pid"], r["adopted"], r["ready"]) for r in replicas]
                == [(runners_before[0], True, True)]
            )

        wait_for(adopted, "the runner adopted by the new hk-a agent", api)
        wait_for(lambda: ready_on(api) == {"hk-a": 1, "hk-b": 1}, "back with both replicas ready", api)
        after = deployment(api)
        for name in (
            "replicas",
            "region",
            "device",
            "max_batch_size",
            "max_queue_delay_ms",
            "model_version_id",
        ):
            assert after[name] == before[name], name
        assert {r["id"] for r in after["replica_set"]} == {r["id"] for r in before["replica_set"]}
        assert runner_pids(stack.node_dir("hk-a")) == runners_before  # adopted, not started again
        assert runners_match_placement(stack, api)
        served = time.monotonic()
        wait_for(lambda: load.since(served).count(200) >= 5, "serving after the restarts", api)
        assert load.since(start).count(200) > 0


def test_killed_hk_agents_fail_over_to_the_other_hk_node_then_to_us(fleet) -> None:
    stack, load = fleet["stack"], fleet["load"]
    with stack.client(fleet["keys"]["manage"]) as api:
        wait_for(lambda: ready_on(api) == {"hk-a": 1, "hk-b": 1}, "one replica on each hk node", api)
        killed = time.monotonic()
        assert len(stack.kill_node("hk-a")) == 1  # the agent and its runner, as a machine losing power
        # The node turns not ready within the window: silent for OFFLINE_AFTER_S, seen by the next sweep.
        wait_for(lambda: node_status(api, "hk-a") == "offline", "hk-a not ready", api,
                 timeout=OFFLINE_AFTER_S + SWEEP_S + 5)  # fmt: skip
        wait_for(lambda: ready_on(api) == {"hk-b": 2}, "a replacement replica ready on hk-b", api)
        replaced = time.monotonic()
        # hk-b served all along: only requests in flight to the killed runner may fail (the gateway
        # retries a refused connection on the other replica; one already sent cannot be retried).
        failures = load.failures_since(killed, replaced)
        assert len(load.since(killed)) > 10 and len(failures) <= 2, failures

        stack.kill_node("hk-b")
        wait_for(lambda: ready_on(api).get("us-a", 0) >= 1, "failed over to us-a", api, timeout=90)
        over = time.monotonic()
        wait_for(lambda: load.since(over).count(200) >= 5, "traffic served from us", api)
        assert node_status(api, "hk-b") == "offline"
        assert deployment(api)["replicas"] == 2

        # Both hk agents come back (hk-b with the credential its join stored): reconciled, no duplicate,
        # and the replicas move home (a new one ready in hk before each in us retires).
        stack.restart_node("hk-a")
        stack.restart_node("hk-b")
        wait_for(lambda: node_status(api, "hk-a") == node_status(api, "hk-b") == "online", "hk back", api)
        back = time.monotonic()
        wait_for(lambda: ready_on(api) == {"hk-a": 1, "hk-b": 1} and len(deployment(api)["replica_set"]) == 2
                 and runners_match_placement(stack, api), "both replicas home, one runner each", api,
                 timeout=120)  # fmt: skip
        settled = time.monotonic()
        wait_for(lambda: load.since(settled).count(200) >= 5, "serving after the hk nodes came back", api)
        assert deployment(api)["placement"]["in_preferred_region"]
        assert not load.failures_since(back, settled), load.errors_since(back)


def test_draining_an_hk_node_under_load_moves_its_replica_with_no_failed_request(fleet) -> None:
    stack, load = fleet["stack"], fleet["load"]
    with stack.client(fleet["keys"]["manage"]) as api:
        wait_for(
            lambda: ready_on(api) == {"hk-a": 1, "hk-b": 1}, "one replica on each hk node", api, timeout=120
        )
        began = time.monotonic()
        drained = api.post("/api/v1/nodes/hk-a/drain")
        assert drained.status_code == 200 and drained.json()["mode"] == "draining", drained.text
        # The replacement starts elsewhere (hk-b: same region, hk-a takes no new replica) and is ready
        # before hk-a's replica retires; its runner stops with it.
        wait_for(lambda: ready_on(api) == {"hk-b": 2} and len(deployment(api)["replica_set"]) == 2
                 and runners_match_placement(stack, api), "hk-a drained onto hk-b", api)  # fmt: skip
        moved = time.monotonic()
        wait_for(lambda: load.since(moved).count(200) >= 5, "serving after the drain", api)
        assert len(load.since(began)) > 10 and not load.failures_since(began), load.errors_since(began)
        assert runner_pids(stack.node_dir("hk-a")) == []
