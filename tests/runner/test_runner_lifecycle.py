"""Process lifecycle: start-up refusal, the LISTENING line, readiness, back-pressure and shutdown."""

from __future__ import annotations

import asyncio
import io
import json
import subprocess
import sys

import httpx
import pytest
from PIL import Image

from tests.support.runners import REPO, image_manifest, launch_runner, runner_command, write_manifest


def run_to_exit(model_dir, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        runner_command(model_dir, *args), cwd=REPO, capture_output=True, text=True, timeout=60
    )


@pytest.mark.parametrize(
    ("manifest", "message"),
    [
        ({"task": "image-classification"}, "missing field 'deployment'"),
        (image_manifest(task="speech"), "unsupported task"),
        (image_manifest(model_file="missing.onnx"), "does not exist"),
        (image_manifest(model_file="../../etc/passwd"), "outside the model directory"),
        (
            image_manifest(preprocessing={"input_size": [16], "mean": [0.5] * 3, "std": [0.5] * 3}),
            "input_size",
        ),
        (image_manifest(labels="red"), "'labels'"),
    ],
)
def test_bad_manifest_exits_2_with_one_line(tmp_path, colour_model_dir, manifest, message) -> None:
    (tmp_path / "model.onnx").write_bytes((colour_model_dir / "model.onnx").read_bytes())
    write_manifest(tmp_path, manifest)
    result = run_to_exit(tmp_path)
    assert result.returncode == 2
    assert message in result.stderr and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and result.stdout == ""


def test_manifest_that_is_not_json_exits_2(tmp_path) -> None:
    (tmp_path / "lantau.json").write_text("{oops")
    result = run_to_exit(tmp_path)
    assert result.returncode == 2 and "not valid JSON" in result.stderr and "Traceback" not in result.stderr


def test_label_count_that_disagrees_with_the_model_exits_2(tmp_path, colour_model_dir) -> None:
    (tmp_path / "model.onnx").write_bytes((colour_model_dir / "model.onnx").read_bytes())
    write_manifest(tmp_path, image_manifest(labels=["only", "two"]))
    result = run_to_exit(tmp_path)
    assert result.returncode == 2 and "2 labels but the model outputs 3" in result.stderr
    assert "Traceback" not in result.stderr


def test_corrupt_model_file_exits_2(tmp_path) -> None:
    (tmp_path / "model.onnx").write_bytes(b"definitely not onnx")
    write_manifest(tmp_path, image_manifest())
    result = run_to_exit(tmp_path)
    assert (
        result.returncode == 2 and "cannot load model" in result.stderr and "Traceback" not in result.stderr
    )


def test_empty_labels_become_class_names_and_sigterm_exits_0(tmp_path, colour_model_dir) -> None:
    (tmp_path / "model.onnx").write_bytes((colour_model_dir / "model.onnx").read_bytes())
    write_manifest(tmp_path, image_manifest(labels=[]))
    runner = launch_runner(tmp_path, tmp_path / "runner.log")
    try:
        buffer = io.BytesIO()
        Image.new("RGB", (20, 20), (10, 10, 240)).save(buffer, "PNG")
        response = httpx.post(
            f"{runner.url}/v1/deployments/colours/predict",
            content=buffer.getvalue(),
            headers={"Content-Type": "image/png"},
        )
        assert response.json()["predictions"][0] == {
            "label": "class_2",
            "index": 2,
            "score": pytest.approx(1.0),
        }
    finally:
        assert runner.stop() == 0


def test_full_queue_answers_429_with_retry_after(slow_model_dir, tmp_path) -> None:
    runner = launch_runner(
        slow_model_dir,
        tmp_path / "slow.log",
        "--max-batch-size",
        "1",
        "--max-queue",
        "1",
        "--max-queue-delay-ms",
        "0",
    )
    buffer = io.BytesIO()
    Image.new("RGB", (128, 128), (200, 30, 30)).save(buffer, "PNG")

    async def send_all() -> list[httpx.Response]:
        async with httpx.AsyncClient(base_url=runner.url, timeout=60) as client:
            return await asyncio.gather(
                *(
                    client.post(
                        "/v1/deployments/slow/predict",
                        content=buffer.getvalue(),
                        headers={"Content-Type": "image/png"},
                    )
                    for _ in range(8)
                )
            )

    try:
        responses = asyncio.run(send_all())
    finally:
        runner.stop()
    statuses = sorted(r.status_code for r in responses)
    assert 200 in statuses and 429 in statuses and set(statuses) <= {200, 429}
    refused = next(r for r in responses if r.status_code == 429)
    assert refused.headers["Retry-After"] == "1" and refused.json()["error"]["type"] == "queue_full"


def test_bad_argument_exits_2(colour_model_dir) -> None:
    result = run_to_exit(colour_model_dir, "--max-batch-size", "0")
    assert result.returncode == 2 and "--max-batch-size" in result.stderr


def test_listening_line_is_printed_with_the_chosen_port(colour_runner) -> None:
    # launch_runner parsed "LANTAU_RUNNER_LISTENING port=<N>" and reached /readyz on that port.
    assert colour_runner.port > 0
    assert httpx.get(f"{colour_runner.url}/healthz").status_code == 200


def test_runner_does_not_import_django_or_torch() -> None:
    code = (
        "import sys, inference.runner.__main__, inference.runner.app; "
        "bad = [m for m in ('django', 'torch', 'transformers') if m in sys.modules]; print(json.dumps(bad))"
    )
    result = subprocess.run(
        [sys.executable, "-c", "import json; " + code], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == []
