"""Jobs through a real Celery worker: quantize and deploy the result, cancel, survive a killed worker."""

from __future__ import annotations

import os
import signal
import time

import pytest

from tests.support.factories import image_bytes
from tests.support.tiny_models import COLOURS, colour_classifier

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def jay(stack):
    stack.user("jay", "jobs-team", "owner")
    return {"manage": stack.api_key("jay", "manage"), "infer": stack.api_key("jay", "inference")}


@pytest.fixture(scope="module")
def version(stack, jay, tmp_path_factory):
    path = colour_classifier(tmp_path_factory.mktemp("j") / "m.onnx")
    with stack.client(jay["manage"]) as api:
        r = api.post(
            "/api/v1/models",
            files={"file": ("m.onnx", path.read_bytes())},
            data={
                "name": "job-colours",
                "task": "image-classification",
                "labels": "\n".join(COLOURS),
                "preprocessing": '{"mean": [0, 0, 0], "std": [1, 1, 1]}',
            },
        )
        assert r.status_code == 201, r.text
        return r.json()


@pytest.fixture(scope="module")
def slow_version(stack, jay, tmp_path_factory):
    """A model whose benchmark takes seconds (1000 runs on 1024x1024 inputs), to catch a job running."""
    path = colour_classifier(tmp_path_factory.mktemp("s") / "m.onnx", size=1024)
    with stack.client(jay["manage"]) as api:
        r = api.post(
            "/api/v1/models",
            files={"file": ("m.onnx", path.read_bytes())},
            data={
                "name": "job-slow",
                "task": "image-classification",
                "labels": "\n".join(COLOURS),
                "preprocessing": '{"mean": [0, 0, 0], "std": [1, 1, 1]}',
            },
        )
        assert r.status_code == 201, r.text
        return r.json()


def wait_job(api, job_id, statuses, timeout=120):
    deadline = time.monotonic() + timeout
    body = {}
    while time.monotonic() < deadline:
        body = api.get(f"/api/v1/jobs/{job_id}").json()
        if body["status"] in statuses:
            return body
        time.sleep(0.3)
    raise AssertionError(f"job {job_id} still {body.get('status')} after {timeout}s: {body}")


def test_static_int8_job_yields_a_deployable_version_with_a_report(stack, jay, version):
    with stack.client(jay["manage"]) as api:
        job = api.post(
            "/api/v1/jobs",
            json={
                "version_id": version["id"],
                "kind": "quantize_int8",
                "options": {"mode": "static", "calibration_limit": 16},
            },
        ).json()
        done = wait_job(api, job["id"], {"succeeded", "failed"})
        assert done["status"] == "succeeded", done["error"]
        assert done["progress"] == 100 and done["output"] == "job-colours:2"
        log = [line["message"] for line in api.get(f"/api/v1/jobs/{job['id']}/log").json()]
        assert log[-1].startswith("succeeded") and len(log) >= 2  # progress lines are throttled to 1 a second
        child = next(v for v in api.get("/api/v1/models/job-colours").json()["versions"] if v["number"] == 2)
        assert child["precision"] == "int8" and child["parent_id"] == version["id"]
        report = child["report"]
        assert 0.9 <= report["agreement"]["top1_agreement"] <= 1.0
        assert (
            set(report["latency"]["speedup"]) == {"1", "8"} and report["latency"]["child"]["size_bytes"] > 0
        )
        assert child["lineage"]["options"] == {"mode": "static", "calibration_limit": 16}
        r = api.post(
            "/api/v1/deployments", json={"name": "job-colours-int8", "model_version_id": child["id"]}
        )
        assert r.status_code == 201
        stack.wait_deployment(api, "job-colours-int8")
    with stack.client(jay["infer"]) as c:
        answer = c.post(
            "/v1/deployments/job-colours-int8/predict",
            content=image_bytes((240, 20, 20)),
            headers={"Content-Type": "image/jpeg"},
        )
    assert answer.status_code == 200 and answer.json()["predictions"][0]["label"] == "red"
    assert answer.json()["model_version"] == "job-colours:2"


def test_cancelling_a_running_job_stops_it(stack, jay, slow_version):
    with stack.client(jay["manage"]) as api:
        job = api.post(
            "/api/v1/jobs",
            json={"version_id": slow_version["id"], "kind": "benchmark", "options": {"runs": 1000}},
        ).json()
        wait_job(api, job["id"], {"running"}, timeout=60)
        assert api.post(f"/api/v1/jobs/{job['id']}/cancel").status_code == 200
        done = wait_job(api, job["id"], {"cancelled", "succeeded", "failed"}, timeout=30)
        assert done["status"] == "cancelled"


def test_a_job_whose_worker_is_killed_ends_failed_and_can_be_retried(stack, jay, slow_version):
    with stack.client(jay["manage"]) as api:
        job = api.post(
            "/api/v1/jobs",
            json={"version_id": slow_version["id"], "kind": "benchmark", "options": {"runs": 1000}},
        ).json()
        wait_job(api, job["id"], {"running"}, timeout=60)
        stack.kill("worker", signal.SIGKILL)
        stack.start_worker()
        done = wait_job(api, job["id"], {"failed", "succeeded", "cancelled"}, timeout=60)
        assert done["status"] == "failed" and "stopped responding" in done["error"]
        retried = api.post(f"/api/v1/jobs/{job['id']}/retry").json()
        assert retried["status"] == "queued"
        wait_job(api, job["id"], {"running"}, timeout=60)
        api.post(f"/api/v1/jobs/{job['id']}/cancel")
        assert (
            wait_job(api, job["id"], {"cancelled", "failed", "succeeded"}, timeout=30)["status"]
            == "cancelled"
        )
    assert os.path.exists(stack.logs / "worker.log")
