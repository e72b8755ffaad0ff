"""Rollouts end to end on the shared stack (console, worker with beat, one hk node agent, real runners),
with a thread sending requests through the console's ``/v1/`` all along:

* a rollout to a version whose ONNX graph passes the upload checks but that onnxruntime cannot load
  rolls back by itself (the runner refuses it, the agent reports the replica failed), and not one
  request fails meanwhile;
* a rollout to a version that loads but fails real requests (500s: its error rate climbs while it
  serves beside the old one, ``LANTAU_ROLLOUT_BAKE_S``) rolls back by itself, no request failing;
* a rollout to a good version finishes with zero failed requests;
* a 10% canary receives about 10% of 400 requests, then is aborted.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from bench.coldstart import ColdStartOptions, run_coldstart
from tests.support.deployments import deploy_colours
from tests.support.factories import image_bytes
from tests.support.stack import Stack
from tests.support.tiny_models import COLOURS, colour_classifier

pytestmark = pytest.mark.e2e
NAME = "ro-colours"


def unloadable_classifier(path: Path, size: int = 16) -> Path:
    """The colour classifier with one more node, of an operator domain no runtime provides: ONNX's checker
    and the upload checks accept it (inputs, outputs and classes are right), onnxruntime refuses it."""
    weights = numpy_helper.from_array(np.eye(3, dtype=np.float32) * 10.0, "weights")
    bias = numpy_helper.from_array(np.zeros(3, dtype=np.float32), "bias")
    graph = helper.make_graph(
        [
            helper.make_node("GlobalAveragePool", ["pixel_values"], ["pooled"]),
            helper.make_node("Flatten", ["pooled"], ["flat"]),
            helper.make_node("Gemm", ["flat", "weights", "bias"], ["scores"]),
            helper.make_node("Missing", ["scores"], ["logits"], domain="lantau.test.missing"),
        ],
        "colour",
        [helper.make_tensor_value_info("pixel_values", TensorProto.FLOAT, ["batch", 3, size, size])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 3])],
        initializer=[weights, bias],
    )
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("lantau.test.missing", 1)]
    model = helper.make_model(graph, opset_imports=opsets)
    model.ir_version = 8
    onnx.save(model, path)
    return path


def erratic_classifier(path: Path, size: int = 16) -> Path:
    """The colour classifier, but its output reshaped to [-1, 1003] once a pixel is brighter than 0.5:
    the warm-up's blank images pass, any real colour fails in onnxruntime (the runner answers 500)."""
    weights = numpy_helper.from_array(np.eye(3, dtype=np.float32) * 10.0, "weights")
    constants = [numpy_helper.from_array(np.zeros(3, dtype=np.float32), "bias"),
                 numpy_helper.from_array(np.array(0.5, dtype=np.float32), "half"),
                 numpy_helper.from_array(np.array([-1, 3], dtype=np.int64), "base"),
                 numpy_helper.from_array(np.array([0, 1000], dtype=np.int64), "wrong")]  # fmt: skip
    graph = helper.make_graph(
        [
            helper.make_node("GlobalAveragePool", ["pixel_values"], ["pooled"]),
            helper.make_node("Flatten", ["pooled"], ["flat"]),
            helper.make_node("Gemm", ["flat", "weights", "bias"], ["scores"]),
            helper.make_node("ReduceMax", ["pixel_values"], ["peak"], keepdims=0),
            helper.make_node("Greater", ["peak", "half"], ["bright"]),
            helper.make_node("Cast", ["bright"], ["flag"], to=TensorProto.INT64),
            helper.make_node("Mul", ["wrong", "flag"], ["extra"]),
            helper.make_node("Add", ["base", "extra"], ["shape"]),
            helper.make_node("Reshape", ["scores", "shape"], ["logits"]),
        ],
        "colour",
        [helper.make_tensor_value_info("pixel_values", TensorProto.FLOAT, ["batch", 3, size, size])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 3])],
        initializer=[weights, *constants],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


@dataclass
class Load:
    """Sequential requests through the console's ``/v1/`` from a thread, each outcome kept in order:
    (monotonic time, status or 0 for no answer, the answering version)."""

    stack: Stack
    key: str
    outcomes: list[tuple[float, int, str]] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        with self.stack.client(self.key) as client:
            while not self.stop.is_set() and len(self.outcomes) < 20_000:  # bounded
                self.outcomes.append((time.monotonic(), *predict(client)))
                time.sleep(0.02)

    def since(self, start: float) -> list[tuple[int, str]]:
        return [(status, version) for at, status, version in list(self.outcomes) if at >= start]


def predict(client: httpx.Client) -> tuple[int, str]:
    """One red image; (200, version) when answered right, else (status or 0, "")."""
    try:
        answer = client.post(f"/v1/deployments/{NAME}/predict", content=image_bytes((250, 10, 10)),
                             headers={"Content-Type": "image/jpeg"}, timeout=10)  # fmt: skip
    except httpx.HTTPError:
        return 0, ""
    if answer.status_code != 200:
        return answer.status_code, ""
    body = answer.json()
    return (200, body["model_version"]) if body["predictions"][0]["label"] == "red" else (299, "")


def wait_for(check: Callable[[], object], what: str, api: httpx.Client, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.2)
    raise AssertionError(f"not {what} after {timeout} s: {api.get(f'/api/v1/deployments/{NAME}').json()}")


def upload(api: httpx.Client, path: Path) -> tuple[int, str]:
    """Upload ``path`` as the next version of model ``ro-colours``: its id and name (``ro-colours:<n>``)."""
    answer = api.post("/api/v1/models", files={"file": (path.name, path.read_bytes(), "application/octet-stream")},
                      data={"name": NAME, "task": "image-classification", "labels": "\n".join(COLOURS),
                            "preprocessing": '{"mean": [0, 0, 0], "std": [1, 1, 1]}'})  # fmt: skip
    assert answer.status_code == 201, answer.text
    return answer.json()["id"], f"{NAME}:{answer.json()['number']}"


@pytest.fixture(scope="module")
def world(stack: Stack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    """``ro-colours`` (version 1, one replica) serving, and a load thread on it."""
    workdir = tmp_path_factory.mktemp("rollouts")
    stack.user("rollout-owner", "rollouts", "owner")
    manage, infer = stack.api_key("rollout-owner", "manage"), stack.api_key("rollout-owner", "inference")
    deploy_colours(stack, manage, NAME, workdir, replicas=1)
    with stack.client(manage) as api:
        stack.wait_deployment(api, NAME)
    load = Load(stack, infer)
    thread = threading.Thread(target=load.run, name="rollout-load", daemon=True)
    thread.start()
    yield {"stack": stack, "manage": manage, "infer": infer, "load": load, "workdir": workdir}
    load.stop.set()
    thread.join(15)


def deployment(api: httpx.Client) -> dict:
    return api.get(f"/api/v1/deployments/{NAME}").json()


def test_a_version_that_cannot_load_rolls_back_while_every_request_succeeds(world) -> None:
    stack, load = world["stack"], world["load"]
    with stack.client(world["manage"]) as api:
        wait_for(lambda: load.since(0), "serving", api)
        start = time.monotonic()
        bad, _ = upload(api, unloadable_classifier(world["workdir"] / "unloadable.onnx"))
        changed = api.patch(f"/api/v1/deployments/{NAME}", json={"model_version_id": bad})
        assert changed.status_code == 200 and changed.json()["rollout"]["state"] == "in_progress"
        wait_for(lambda: deployment(api)["rollout"]["state"] == "rolled_back", "rolled back", api)
        body = deployment(api)
        assert body["model_version"] == f"{NAME}:1"
        assert "cannot load model" in body["rollout"]["reason"], body["rollout"]
        wait_for(lambda: [r["model_version"] for r in deployment(api)["replica_set"]] == [f"{NAME}:1"],
                 "back to the old replica alone", api)  # fmt: skip
        served = time.monotonic()
        wait_for(lambda: len(load.since(served)) >= 5, "serving after the rollback", api)
        outcomes = load.since(start)
        assert [o for o in outcomes if o[0] != 200] == []
        assert {version for _, version in outcomes} == {f"{NAME}:1"}


def test_a_version_whose_errors_climb_rolls_back_while_every_request_succeeds(world) -> None:
    stack, load = world["stack"], world["load"]
    with stack.client(world["manage"]) as api:
        start = time.monotonic()
        erratic, version = upload(api, erratic_classifier(world["workdir"] / "erratic.onnx"))
        assert api.patch(f"/api/v1/deployments/{NAME}", json={"model_version_id": erratic}).status_code == 200
        wait_for(lambda: deployment(api)["rollout"]["state"] == "rolled_back", "rolled back", api)
        body = deployment(api)
        assert body["model_version"] == f"{NAME}:1" and body["rollout"]["to"]["model_version"] == version
        assert body["rollout"]["reason"].startswith("the new replicas answered "), body["rollout"]
        wait_for(lambda: [r["model_version"] for r in deployment(api)["replica_set"]] == [f"{NAME}:1"],
                 "back to the old replica alone", api)  # fmt: skip
        served = time.monotonic()
        wait_for(lambda: len(load.since(served)) >= 5, "serving after the rollback", api)
        outcomes = load.since(start)
        assert [o for o in outcomes if o[0] != 200] == []  # the console retried the new one's 500s on the old


def test_a_rollout_to_a_good_version_fails_no_request(world) -> None:
    stack, load = world["stack"], world["load"]
    with stack.client(world["manage"]) as api:
        start = time.monotonic()
        good, version = upload(api, colour_classifier(world["workdir"] / "good.onnx", size=8))
        world["good"] = version
        assert api.patch(f"/api/v1/deployments/{NAME}", json={"model_version_id": good}).status_code == 200
        wait_for(lambda: deployment(api)["rollout"]["state"] == "done", "rolled out", api)
        assert [(r["model_version"], r["state"]) for r in deployment(api)["replica_set"]] == [
            (version, "ready")
        ]
        wait_for(lambda: any(v == version for _, v in load.since(start)), "served by the new version", api)
        served = time.monotonic()
        wait_for(lambda: len(load.since(served)) >= 5, "serving after the rollout", api)
        outcomes = load.since(start)
        assert [o for o in outcomes if o[0] != 200] == []
        assert outcomes[-1] == (200, version)


def test_a_ten_percent_canary_gets_about_ten_percent_of_requests(world) -> None:
    stack = world["stack"]
    with stack.client(world["manage"]) as api, stack.client(world["infer"]) as client:
        old = next(v["id"] for m in api.get("/api/v1/models").json() if m["name"] == NAME
                   for v in m["versions"] if v["number"] == 1)  # fmt: skip
        started = api.post(
            f"/api/v1/deployments/{NAME}/canary", json={"model_version_id": old, "percent": 10}
        )
        assert started.status_code == 200, started.text
        canary = f"{NAME}:1"
        wait_for(lambda: any(r["model_version"] == canary and r["state"] == "ready"
                             for r in deployment(api)["replica_set"]), "the canary replica ready", api)  # fmt: skip
        wait_for(lambda: predict(client)[1] == canary, "the canary in the console's routes", api)
        answers = [predict(client) for _ in range(400)]
        assert [a for a in answers if a[0] != 200] == []
        share = sum(1 for _, v in answers if v == canary) / len(answers)
        assert 0.04 <= share <= 0.18, share
        figures = deployment(api)["canary"]
        assert (figures["version"], figures["percent"], figures["canary"]["replicas"]) == (canary, 10, 1)
        assert api.post(f"/api/v1/deployments/{NAME}/canary/abort").status_code == 200
        wait_for(lambda: [r["model_version"] for r in deployment(api)["replica_set"]] == [world["good"]],
                 "the canary replica retired", api)  # fmt: skip


def test_a_burst_scales_out_to_the_maximum_and_back_in_when_idle(world) -> None:
    stack, name = world["stack"], "as-colours"
    deploy_colours(stack, world["manage"], name, world["workdir"], replicas=1)
    with stack.client(world["manage"]) as api:
        stack.wait_deployment(api, name)
        scaling = {
            "min_replicas": 1,
            "max_replicas": 2,
            "target_inflight_per_replica": 0.1,
            "scale_cooldown_s": 0,
        }
        assert api.put(f"/api/v1/deployments/{name}/autoscaling", json=scaling).status_code == 200
        stop = threading.Event()

        def burst() -> None:
            with stack.client(world["infer"]) as client:
                for _ in range(5_000):  # bounded
                    if stop.is_set():
                        return
                    client.post(f"/v1/deployments/{name}/predict", content=image_bytes((250, 10, 10)),
                                headers={"Content-Type": "image/jpeg"}, timeout=10)  # fmt: skip

        threads = [threading.Thread(target=burst, daemon=True) for _ in range(4)]
        for thread in threads:
            thread.start()
        try:
            wait_for(
                lambda: api.get(f"/api/v1/deployments/{name}").json()["replicas"] == 2, "scaled out", api
            )
        finally:
            stop.set()
            for thread in threads:
                thread.join(15)
        wait_for(
            lambda: api.get(f"/api/v1/deployments/{name}").json()["replicas"] == 1, "scaled back in", api
        )
        body = api.get(f"/api/v1/deployments/{name}").json()
        decisions = [(d["from"], d["to"]) for d in body["autoscaling"]["decisions"]]
        assert decisions[0] == (1, 2) and decisions[-1] == (2, 1), body["autoscaling"]
        assert max(to for _, to in decisions) == 2  # never past the maximum
        assert "requests in flight on average" in body["autoscaling"]["decisions"][0]["reason"]
        wait_for(
            lambda: len(api.get(f"/api/v1/deployments/{name}").json()["replica_set"]) == 1, "one replica", api
        )


def test_a_deployment_scaled_to_zero_holds_its_first_requests_then_goes_back_to_zero(world) -> None:
    """Through the console's /v1/ with the real worker and node agent (``bench.coldstart``, the bench's
    scale-from-zero scenario on the shared stack): idle, it goes to zero replicas; requests sent then
    are held while the worker wakes it and the agent starts a runner, then served, none failing; idle
    again, it returns to zero."""
    options = ColdStartOptions.quick()
    line = run_coldstart(world["stack"], world["workdir"], options, world["manage"], world["infer"])
    assert line["errors"] == 0 and line["requests"] >= options.clients, line
    assert line["woken_by"] == ["a request arrived while scaled to zero"], line
    assert 0 < line["cold_start_ms"] and 0 < line["p50_ms"] <= line["p99_ms"], line
    assert line["back_to_zero_s"] >= 0
