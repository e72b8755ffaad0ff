"""Uploads checked by a worker: Hugging Face folders, TorchScript, ONNX with external data, hostile archives.

The job service runs here in-process (the Celery task only calls it); tests/integration covers the worker.
"""

import io
import json
import zipfile
from pathlib import Path

import numpy as np
import onnx
import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from onnx import TensorProto, helper, numpy_helper

from inference.jobs.runner import job_execute
from inference.models import Artifact, Job, ModelVersion, RegisteredModel
from tests.support.factories import zip_folder
from tests.support.tiny_models import tiny_vit_folder

pytestmark = pytest.mark.django_db


def post(client, files, **fields):
    form = {"name": "imported", "task": "", **fields}
    uploads = [SimpleUploadedFile(name, data) for name, data in files]
    if len(uploads) == 1:
        form["file"] = uploads[0]
    else:
        form["files"] = uploads
    return client.post("/api/v1/models", form)


def run_import(client, files, **fields) -> Job:
    r = post(client, files, **fields)
    assert r.status_code == 202, r.content
    job_execute(r.json()["id"])
    return Job.objects.get(pk=r.json()["id"])


def blobs(settings) -> set[str]:
    root = Path(settings.STORAGE_DIR) / "sha256"
    return {p.name for p in root.rglob("*") if p.is_file()} if root.exists() else set()


def zipped(entries: dict[str, bytes], *, compression=zipfile.ZIP_DEFLATED) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression) as zf:
        for name, data in entries.items():
            zf.writestr(name, data)
    return buf.getvalue()


@pytest.fixture(scope="module")
def vit_zip(tmp_path_factory) -> bytes:
    tmp = tmp_path_factory.mktemp("vit")
    return zip_folder(tiny_vit_folder(tmp / "vit"), tmp / "vit.zip").read_bytes()


def test_hugging_face_zip_imports_then_exports_to_a_deployable_onnx(owner_client, vit_zip, settings):
    job = run_import(owner_client, [("vit.zip", vit_zip)])
    assert job.status == "succeeded", job.error
    version = job.output
    assert (version.format, version.model.task, version.labels) == (
        "huggingface",
        "image-classification",
        ["cat", "dog", "fox"],
    )
    kept = set(version.artifacts.values_list("filename", flat=True))
    assert {"config.json", "model.safetensors", "preprocessor_config.json", "labels.json"} <= kept
    assert not blobs(settings) - set(
        Artifact.objects.values_list("sha256", flat=True)
    )  # the zip itself is gone
    r = owner_client.post(
        "/api/v1/deployments",
        {"name": "vit", "model_version_id": version.pk},
        content_type="application/json",
    )
    assert r.status_code == 422 and "export it to ONNX" in r.json()["error"]["message"]

    export = owner_client.post(
        "/api/v1/jobs", {"version_id": version.pk, "kind": "export_onnx"}, content_type="application/json"
    ).json()
    assert job_execute(export["id"]) == "succeeded", Job.objects.get(pk=export["id"]).error
    onnx_version = Job.objects.get(pk=export["id"]).output
    assert onnx_version.format == "onnx" and onnx_version.parent_id == version.pk
    assert onnx_version.preprocessing["input_size"] == [32, 32] and onnx_version.labels == [
        "cat",
        "dog",
        "fox",
    ]
    assert (
        owner_client.post(
            "/api/v1/deployments",
            {"name": "vit", "model_version_id": onnx_version.pk},
            content_type="application/json",
        ).status_code
        == 201
    )


def test_hugging_face_files_uploaded_one_by_one_are_imported(owner_client, tmp_path):
    folder = tiny_vit_folder(tmp_path / "vit")
    files = [(p.name, p.read_bytes()) for p in sorted(folder.iterdir())]
    job = run_import(owner_client, files, task="image-classification")
    assert job.status == "succeeded", job.error
    assert job.output.format == "huggingface"


def test_declared_task_must_match_the_config(owner_client, vit_zip, settings):
    job = run_import(owner_client, [("vit.zip", vit_zip)], task="feature-extraction")
    assert job.status == "failed" and "declared feature-extraction" in job.error
    assert not RegisteredModel.objects.exists() and blobs(settings) == set()


@pytest.mark.parametrize(
    "entries, message",
    [
        ({"../evil.txt": b"x"}, "outside"),
        ({"/etc/passwd": b"x"}, ""),
        ({"big.bin": b"\0" * 50_000_000}, "zip bomb"),
    ],
)
def test_hostile_zips_fail_cleanly(owner_client, settings, entries, message):
    job = run_import(owner_client, [("evil.zip", zipped(entries))], task="image-classification")
    assert job.status == "failed" and job.error and message in job.error
    assert not ModelVersion.objects.exists() and blobs(settings) == set()


def test_corrupt_zip_fails_cleanly(owner_client, vit_zip, settings):
    job = run_import(
        owner_client, [("broken.zip", vit_zip[: len(vit_zip) // 2])], task="image-classification"
    )
    assert job.status == "failed" and ("zip" in job.error or "archive" in job.error)
    assert not ModelVersion.objects.exists() and blobs(settings) == set()


def test_config_needing_remote_code_is_refused(owner_client, tmp_path, settings):
    folder = tiny_vit_folder(tmp_path / "vit")
    config = json.loads((folder / "config.json").read_text())
    config["auto_map"] = {"AutoModelForImageClassification": "modeling_evil.EvilModel"}
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "modeling_evil.py").write_text("import os; os.system('touch /tmp/pwned')")
    job = run_import(owner_client, [("vit.zip", zip_folder(folder, tmp_path / "v.zip").read_bytes())])
    assert job.status == "failed" and "remote code" in job.error
    assert blobs(settings) == set()


def test_pickled_checkpoints_are_refused(owner_client, tmp_path):
    import pickle

    import torch

    r = post(
        owner_client,
        [("weights.pkl", pickle.dumps({"w": [1, 2, 3]}, protocol=4))],
        task="image-classification",
    )
    assert r.status_code == 422 and "pickle" in r.json()["error"]["message"].lower()
    torch.save({"w": torch.zeros(2)}, tmp_path / "ckpt.pt")  # torch's zip format with data.pkl inside
    job = run_import(
        owner_client, [("ckpt.pt", (tmp_path / "ckpt.pt").read_bytes())], task="image-classification"
    )
    assert job.status == "failed" and "pickle" in job.error.lower()


def _onnx_with_external(folder: Path, location: str) -> bytes:
    weights = numpy_helper.from_array(np.eye(3, dtype=np.float32), "weights")
    weights.data_location = TensorProto.EXTERNAL
    del weights.external_data[:]
    for key, value in (("location", location), ("offset", "0"), ("length", str(9 * 4))):
        entry = weights.external_data.add()
        entry.key, entry.value = key, value
    weights.ClearField("float_data")
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


def test_onnx_with_external_data_imports_and_external_paths_outside_are_refused(
    owner_client, tmp_path, settings
):
    data = np.eye(3, dtype=np.float32).tobytes()
    good = run_import(
        owner_client,
        [("m.onnx", _onnx_with_external(tmp_path, "m.weights")), ("m.weights", data)],
        task="image-classification",
        labels="a\nb\nc",
    )
    assert good.status == "succeeded", good.error
    assert set(good.output.artifacts.values_list("filename", flat=True)) == {
        "model.onnx",
        "m.weights",
        "labels.json",
    }
    assert good.output.inputs[0]["name"] == "x"
    bad = run_import(
        owner_client,
        [("m.onnx", _onnx_with_external(tmp_path, "../../etc/passwd")), ("m.weights", data)],
        task="image-classification",
        name="evil",
    )
    assert bad.status == "failed" and "outside" in bad.error
    assert not RegisteredModel.objects.filter(name="evil").exists()


def test_torchscript_imports_and_exports_with_an_input_shape(owner_client, tmp_path):
    import torch

    net = torch.nn.Sequential(
        torch.nn.Conv2d(3, 4, 3), torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(4, 2)
    ).eval()
    torch.jit.script(net).save(str(tmp_path / "net.pt"))
    job = run_import(
        owner_client,
        [("net.pt", (tmp_path / "net.pt").read_bytes())],
        task="image-classification",
        labels="yes\nno",
        input_shape="[1, 3, 24, 24]",
    )
    assert job.status == "succeeded", job.error
    assert job.output.format == "torchscript"
    export = owner_client.post(
        "/api/v1/jobs", {"version_id": job.output.pk, "kind": "export_onnx"}, content_type="application/json"
    ).json()
    assert job_execute(export["id"]) == "succeeded", Job.objects.get(pk=export["id"]).error
    out = Job.objects.get(pk=export["id"]).output
    assert out.inputs[0]["shape"][1:] == [3, 24, 24] and out.labels == ["yes", "no"]
    from inference import storage

    assert onnx.load(str(storage.blob_path(out.sha256))).graph.node


def test_import_upload_over_the_limit_is_413_and_stores_nothing(owner_client, vit_zip, settings):
    settings.MAX_UPLOAD_BYTES = len(vit_zip) - 1
    r = post(owner_client, [("vit.zip", vit_zip)])
    assert r.status_code == 413
    assert blobs(settings) == set() and not Job.objects.exists()


def test_jobs_read_an_external_data_model_beside_its_weights(owner_client, tmp_path):
    data = np.eye(3, dtype=np.float32).tobytes()
    imported = run_import(
        owner_client,
        [("m.onnx", _onnx_with_external(tmp_path, "m.weights")), ("m.weights", data)],
        task="image-classification",
        labels="a\nb\nc",
        name="ext",
    )
    assert imported.status == "succeeded", imported.error
    r = owner_client.post(
        "/api/v1/jobs",
        {"version_id": imported.output.pk, "kind": "benchmark", "options": {"runs": 6}},
        content_type="application/json",
    )
    assert job_execute(r.json()["id"]) == "succeeded", Job.objects.get(pk=r.json()["id"]).error
    again = owner_client.post(
        "/api/v1/jobs",
        {"version_id": imported.output.pk, "kind": "benchmark", "options": {"runs": 6}},
        content_type="application/json",
    )
    assert job_execute(again.json()["id"]) == "succeeded"  # the linked folder is reused, not rebuilt
