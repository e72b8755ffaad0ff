"""Hostile uploads through the management API and the import job (review findings H3, M8, L6).

Each case asserts the precise status, the error body, that nothing was written (no model, no version,
no blob) and that no secret reached a job's log or error. Jobs run in-process through
``job_execute`` (what the Celery task calls); model code runs in the sandbox's child process.
"""

from __future__ import annotations

import io
import logging
import pickle
import random
import zipfile
from pathlib import Path

import numpy as np
import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from onnx import TensorProto, helper, numpy_helper

from inference import storage
from inference.jobs.runner import job_execute
from inference.models import Job, JobLogLine, ModelVersion, RegisteredModel
from tests.support.tiny_models import colour_classifier

pytestmark = pytest.mark.django_db
MARKER = Path("/tmp/lantau-s3-pickle-ran")


def blobs(settings) -> set[str]:
    root = Path(settings.STORAGE_DIR) / "sha256"
    return {p.name for p in root.rglob("*") if p.is_file()} if root.exists() else set()


def post(client, files, **fields):
    form = {"name": "hostile", "task": "image-classification", "labels": "r\ng\nb", **fields}
    uploads = [SimpleUploadedFile(name, data) for name, data in files]
    form["file" if len(uploads) == 1 else "files"] = uploads[0] if len(uploads) == 1 else uploads
    return client.post("/api/v1/models", form)


def assert_nothing_written(settings, before: set[str]) -> None:
    assert not RegisteredModel.objects.filter(name="hostile").exists()
    assert not ModelVersion.objects.filter(model__name="hostile").exists()
    assert blobs(settings) == before


def assert_no_secret(settings, job: Job | None = None, caplog=None) -> None:
    texts = [job.error, job.message] if job else []
    texts += list(JobLogLine.objects.values_list("message", flat=True))
    texts += [caplog.text] if caplog else []
    assert not any(settings.SECRET_KEY in t for t in texts)


def import_fails(client, settings, files, message: str, caplog=None, **fields) -> Job:
    before = blobs(settings)
    r = post(client, files, **fields)
    assert r.status_code == 202, r.content
    job_execute(r.json()["id"])
    job = Job.objects.get(pk=r.json()["id"])
    assert job.status == "failed" and message in job.error, job.error
    assert_nothing_written(settings, before)
    assert_no_secret(settings, job, caplog)
    return job


class WritesMarker:
    def __reduce__(self):
        return (Path.write_text, (MARKER, "pwned"))


def zipped(entries: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in entries.items():
            zf.writestr(name, data)
    return buf.getvalue()


def test_a_bare_pickle_is_refused_in_the_request(owner_client, settings):
    before = blobs(settings)
    r = post(owner_client, [("model.pkl", pickle.dumps(WritesMarker()))])
    assert r.status_code == 422
    assert r.json()["error"]["type"] == "validation_error"
    assert "pickled PyTorch checkpoints are refused" in r.json()["error"]["message"]
    assert not MARKER.exists()
    assert_nothing_written(settings, before)


def test_a_torch_checkpoint_with_a_reduce_payload_never_runs(owner_client, settings, tmp_path, caplog):
    import torch

    MARKER.unlink(missing_ok=True)
    torch.save({"weights": torch.zeros(2), "payload": WritesMarker()}, tmp_path / "ckpt.pt")
    MARKER.unlink(missing_ok=True)  # torch.save pickles without running __reduce__'s result; be sure
    import_fails(
        owner_client, settings, [("ckpt.pt", (tmp_path / "ckpt.pt").read_bytes())], "pickled", caplog
    )
    assert not MARKER.exists()


def onnx_with_external(location: str) -> bytes:
    weights = numpy_helper.from_array(np.eye(3, dtype=np.float32), "weights")
    weights.data_location = TensorProto.EXTERNAL
    for key, value in (("location", location), ("offset", "0"), ("length", "36")):
        entry = weights.external_data.add()
        entry.key, entry.value = key, value
    weights.ClearField("raw_data")
    graph = helper.make_graph(
        [
            helper.make_node("GlobalAveragePool", ["x"], ["p"]),
            helper.make_node("Flatten", ["p"], ["f"]),
            helper.make_node("MatMul", ["f", "weights"], ["logits"]),
        ],
        "ext",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", 3, 8, 8])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["b", 3])],
        initializer=[weights],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString()


@pytest.mark.parametrize(
    "location",
    ["../m.weights", "../../../../etc/passwd", "/etc/passwd", "*/_ORT_MEM_ADDR_/*", "sub/../m.weights"],
)
def test_onnx_external_data_outside_its_folder_is_refused(owner_client, settings, location, caplog):
    data = np.eye(3, dtype=np.float32).tobytes()
    files = [("m.onnx", onnx_with_external(location)), ("m.weights", data)]
    import_fails(owner_client, settings, files, "outside the model's folder", caplog)


def test_onnx_external_data_through_a_link_is_refused(tmp_path):
    from inference.validation.formats import InvalidModel, sniff

    (tmp_path / "m.onnx").write_bytes(onnx_with_external("m.weights"))
    (tmp_path / "m.weights").symlink_to("/etc/passwd")
    with pytest.raises(InvalidModel, match="outside the model's folder"):
        sniff(tmp_path / "m.onnx")


def test_a_single_onnx_naming_external_data_is_refused_in_the_request(owner_client, settings):
    before = blobs(settings)
    r = post(owner_client, [("m.onnx", onnx_with_external("*/_ORT_MEM_ADDR_/*"))])
    assert r.status_code == 422 and "external data" in r.json()["error"]["message"]
    assert_nothing_written(settings, before)


def test_fuzzed_onnx_bytes_end_in_201_or_422_never_500(owner_client, settings, tmp_path):
    valid = colour_classifier(tmp_path / "c.onnx").read_bytes()
    rng = random.Random(20261202)
    statuses = {}
    for index in range(200):
        data = bytearray(valid)
        for _ in range(rng.randint(1, 8)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        if index % 5 == 0:
            data = data[: rng.randrange(8, len(data))]
        r = post(owner_client, [("m.onnx", bytes(data))], name=f"fuzz-{index}", labels="red\ngreen\nblue")
        statuses[r.status_code] = statuses.get(r.status_code, 0) + 1
        assert r.status_code in (201, 422), (index, r.content)
        if r.status_code == 422:
            assert set(r.json()["error"]) == {"type", "message"}
    assert statuses.get(422) and owner_client.get("/api/v1/models").status_code == 200


@pytest.mark.parametrize(
    "entries, message",
    [
        ({"../evil.onnx": b"x"}, "points outside"),
        ({"/abs.onnx": b"x"}, "absolute"),
        ({"big.bin": b"\0" * (64 * 1024**2)}, "zip bomb"),
    ],
)
def test_zip_slip_and_bombs_fail_the_import(owner_client, settings, entries, message, caplog):
    import_fails(owner_client, settings, [("up.zip", zipped(entries))], message, caplog)


def test_a_zip_with_too_many_entries_fails_at_the_configured_limit(owner_client, settings):
    settings.ARCHIVE_MAX_FILES = 5
    entries = {f"f{i}.txt": b"x" for i in range(6)}
    import_fails(owner_client, settings, [("up.zip", zipped(entries))], "the limit is 5")


def safetensors(header: bytes, body: bytes = b"\0" * 16, length: int | None = None) -> bytes:
    return (len(header) if length is None else length).to_bytes(8, "little") + header + body


@pytest.mark.parametrize(
    "weights, message",
    [
        (safetensors(b'{"w":{"dtype":"F32","shape":[8],"data_offsets":[0,32]}}'), "outside the file"),
        (
            safetensors(
                b'{"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},'
                b'"b":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}}'
            ),
            "overlap",
        ),
        (safetensors(b"{}", length=2**62), "impossible safetensors header length"),
    ],
)
def test_safetensors_with_a_lying_header_fail_the_import(owner_client, settings, weights, message):
    config = b'{"architectures":["ViTForImageClassification"],"id2label":{"0":"a"}}'
    files = [("config.json", config), ("model.safetensors", weights)]
    import_fails(owner_client, settings, files, message, task="")


def memory_bomb() -> bytes:
    """An image classifier whose graph asks onnxruntime for a 40 GB tensor when it runs."""
    shape = numpy_helper.from_array(np.array([100_000, 100_000], dtype=np.int64), "shape")
    nodes = [
        helper.make_node("ConstantOfShape", ["shape"], ["big"], value=helper.make_tensor("v", 1, [1], [1.0])),
        helper.make_node("ReduceSum", ["big"], ["total"], keepdims=0),
        helper.make_node("ReduceMean", ["x"], ["mean"], axes=[2, 3], keepdims=0),
        helper.make_node("Mul", ["total", "zero"], ["nothing"]),
        helper.make_node("Add", ["mean", "nothing"], ["logits"]),
    ]
    zero = numpy_helper.from_array(np.array(0.0, dtype=np.float32), "zero")
    graph = helper.make_graph(
        nodes,
        "bomb",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", 3, 8, 8])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["b", 3])],
        initializer=[shape, zero],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString()


def test_a_model_that_exhausts_memory_fails_its_job_and_the_worker_serves_the_next(
    owner_client, settings, tmp_path, caplog
):
    settings.SANDBOX_MEMORY_BYTES = 2 * 1024**3
    r = post(owner_client, [("bomb.onnx", memory_bomb())], name="bomb")
    assert r.status_code == 201, r.content
    bomb = owner_client.post(
        "/api/v1/jobs", {"version_id": r.json()["id"], "kind": "benchmark"}, content_type="application/json"
    ).json()["id"]
    caplog.set_level(logging.INFO)
    job_execute(bomb)
    job = Job.objects.get(pk=bomb)
    assert job.status == "failed", job.error
    assert "memory limit" in job.error or "killed" in job.error, job.error
    assert_no_secret(settings, job, caplog)
    good = post(owner_client, [("c.onnx", colour_classifier(tmp_path / "c.onnx").read_bytes())], name="good")
    nxt = owner_client.post(
        "/api/v1/jobs",
        {"version_id": good.json()["id"], "kind": "benchmark", "options": {"runs": 3}},
        content_type="application/json",
    ).json()["id"]
    job_execute(nxt)
    assert Job.objects.get(pk=nxt).status == "succeeded", Job.objects.get(pk=nxt).error


def test_a_full_store_answers_507_and_keeps_nothing(owner_client, settings, tmp_path):
    settings.STORAGE_MIN_FREE_BYTES = 2**62  # more than any disk has: the store counts as full
    before = blobs(settings)
    onnx_bytes = colour_classifier(tmp_path / "c.onnx").read_bytes()
    for files in ([("c.onnx", onnx_bytes)], [("up.zip", zipped({"m.onnx": onnx_bytes}))]):
        r = post(owner_client, files)
        assert r.status_code == 507
        assert r.json() == {
            "error": {
                "type": "insufficient_storage",
                "message": "the model store is out of space; nothing was stored (ask an operator to free space)",
            }
        }
        assert_nothing_written(settings, before)
        assert not list((Path(settings.STORAGE_DIR) / "tmp").glob("upload-*"))
    assert not Job.objects.filter(kind="import").exists()


def test_torchscript_exports_in_the_sandbox_and_no_secret_reaches_the_version(
    owner_client, settings, tmp_path
):
    import torch

    class Net(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x.mean(dim=(2, 3))

    torch.jit.script(Net()).save(str(tmp_path / "net.pt"))
    r = post(
        owner_client, [("net.pt", (tmp_path / "net.pt").read_bytes())], input_shape="[1, 3, 8, 8]", name="ts"
    )
    job_execute(r.json()["id"])
    imported = Job.objects.get(pk=r.json()["id"])
    assert imported.status == "succeeded", imported.error
    export = owner_client.post(
        "/api/v1/jobs",
        {"version_id": imported.output_id, "kind": "export_onnx"},
        content_type="application/json",
    ).json()["id"]
    job_execute(export)
    job = Job.objects.get(pk=export)
    assert job.status == "succeeded", job.error
    assert job.output.format == "onnx"
    model = storage.blob_path(job.output.artifacts.get(role="model").sha256).read_bytes()
    assert settings.SECRET_KEY.encode() not in model
    assert_no_secret(settings, job)
