"""Weight-only INT4/INT8 of a tiny causal LM: MatMulNBits in the graph, smaller, compared, and served."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import httpx
import pytest

from contract.generation import GenerationSpec
from contract.manifest import MANIFEST_NAME, ModelManifest, Task
from inference.conversion.weight_only import count_ops, matmul_weights, quantize_weight_only
from inference.demo.tiny_chat import save_untrained
from inference.export.causal_lm import export_model_folder
from tests.support.runners import RUNNER_TOKEN, launch_runner
from tests.support.tiny_models import colour_classifier

TINY_MATMULS = 15  # 2 layers x (q, k, v, o, gate, up, down) + lm_head; K is 64 or 192


@pytest.fixture(autouse=True)
def _isolated_storage(tmp_path):
    # tests/conftest.py's version asks for ``settings``, which tests/jobs/conftest.py stubs out (those tests
    # run without Django); these use the database, so the store goes under tmp_path here.
    from django.test import override_settings

    with override_settings(STORAGE_DIR=tmp_path / "storage"):
        yield


@pytest.fixture(scope="module")
def tiny_lm(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An exported untrained Llama whose end-of-sequence is silenced: answers run to max_tokens."""
    out = tmp_path_factory.mktemp("tiny-lm")
    export_model_folder(save_untrained(out / "hf", "llama", silence_eos=True), out, deployment="tiny")
    return out


@pytest.mark.parametrize(("bits", "block_size"), [(4, 32), (8, 256)])
def test_every_matmul_weight_becomes_matmulnbits_even_when_the_block_exceeds_k(
    tiny_lm, tmp_path, bits, block_size
):
    import onnx

    src = tiny_lm / "model.onnx"
    assert len(matmul_weights(onnx.load(str(src)))) == TINY_MATMULS
    report = quantize_weight_only(src, tmp_path / "q.onnx", bits=bits, block_size=block_size)
    assert count_ops(tmp_path / "q.onnx", "MatMulNBits") == TINY_MATMULS
    assert report["options"]["quantized_nodes"] == TINY_MATMULS and report["options"]["float_matmuls"] == 0
    assert (
        report["options"]["block_size"]
        == min(block_size, 64)
        == min(report["options"]["requested_block_size"], 64)
    )
    assert report["size_bytes"] < 0.6 * src.stat().st_size and report["precision"] == f"int{bits}"


def test_a_graph_without_weights_to_quantize_is_refused_and_leaves_nothing(tmp_path):
    with pytest.raises(ValueError, match="no MatMul with a constant weight"):
        quantize_weight_only(colour_classifier(tmp_path / "c.onnx"), tmp_path / "out" / "q.onnx")
    assert not (tmp_path / "out" / "q.onnx").exists()


def _upload_lm(team, owner, folder: Path):
    from inference.services.registry import UploadedModel, model_version_upload

    generation = json.loads((folder / MANIFEST_NAME).read_text())["generation"]
    upload = UploadedModel(
        name="tiny-lm",
        task="text-generation",
        model_chunks=[(folder / "model.onnx").read_bytes()],
        tokenizer_chunks=[(folder / "tokenizer.json").read_bytes()],
        generation=generation,
    )
    return model_version_upload(team=team, actor=owner, upload=upload)


def _serve(version, folder: Path) -> Path:
    """The version laid out as a node agent would: model.onnx, tokenizer.json and lantau.json."""
    from inference.services.registry import version_file

    folder.mkdir()
    shutil.copyfile(version_file(version, "model"), folder / "model.onnx")
    shutil.copyfile(version_file(version, "tokenizer"), folder / "tokenizer.json")
    manifest = ModelManifest(
        deployment="tiny-int4",
        model_version=str(version),
        task=Task.TEXT_GENERATION,
        tokenizer_file="tokenizer.json",
        generation=GenerationSpec.from_dict(version.runtime_config["generation"]),
    )
    (folder / MANIFEST_NAME).write_text(manifest.to_json())
    return folder


@pytest.mark.django_db
def test_int4_job_on_a_prompt_set_is_smaller_reports_perplexity_and_serves_chat(
    owner, team, tiny_lm, tmp_path
):
    from evalsets.services import dataset_create
    from inference.jobs.runner import job_execute
    from inference.services.jobs import job_start

    source = _upload_lm(team, owner, tiny_lm)
    prompts = b"".join(
        json.dumps({"prompt": p}).encode() + b"\n" for p in ("hello, who are you?", "tell me a story")
    )
    dataset = dataset_create(team=team, actor=owner, name="chats", kind="prompts", chunks=[prompts])
    options = {"bits": 4, "block_size": 32, "dataset_id": dataset.pk}
    job = job_start(team=team, actor=owner, source=source, kind="quantize_weights", options=options)
    assert job_execute(job.pk) == "succeeded", job.__class__.objects.get(pk=job.pk).error
    job.refresh_from_db()
    version = job.output
    assert version.precision == "int4" and version.parent_id == source.pk
    report = version.report
    assert report["size"]["before_bytes"] == source.size_bytes
    assert report["size"]["after_bytes"] < 0.6 * source.size_bytes
    assert version.size_bytes == report["size"]["after_bytes"]
    assert report["speed"]["parent_tokens_per_s"] > 0 and report["speed"]["child_tokens_per_s"] > 0
    agreement = report["agreement"]
    assert (
        agreement["count"] == 2 and agreement["parent_perplexity"] > 1 and agreement["child_perplexity"] > 1
    )
    assert agreement["perplexity_change"] == pytest.approx(
        agreement["child_perplexity"] / agreement["parent_perplexity"] - 1
    )
    assert report["dataset"]["name"] == "chats" and report["dataset"]["id"] == dataset.pk
    assert report["dataset"]["kind"] == "prompts" and report["dataset"]["count"] == 2
    folder = _serve(version, tmp_path / "served")
    assert count_ops(folder / "model.onnx", "MatMulNBits") == TINY_MATMULS
    runner = launch_runner(folder, tmp_path / "runner.log", token=RUNNER_TOKEN)
    try:
        body = {"model": "tiny-int4", "messages": [{"role": "user", "content": "hello"}], "max_tokens": 6}
        headers = {"X-Lantau-Runner-Token": RUNNER_TOKEN}
        r = httpx.post(
            f"{runner.url}/v1/chat/completions", json=body | {"temperature": 0}, headers=headers, timeout=60
        )
    finally:
        runner.stop()
    assert r.status_code == 200, r.text
    answer = r.json()
    assert answer["usage"]["completion_tokens"] == 6 and answer["choices"][0]["finish_reason"] == "length"
    assert answer["choices"][0]["message"]["content"]


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"block_size": 48}, "options.block_size: Value error, must be a power of two"),
        ({"block_size": 512}, "options.block_size: Input should be less than or equal to 256"),
        ({"bits": 3}, "options.bits: Input should be 4 or 8"),
        ({"symmetric": "maybe"}, "options.symmetric"),
    ],
)
def test_bad_options_are_refused_at_start(owner_client, team, owner, tiny_lm, options, message):
    source = _upload_lm(team, owner, tiny_lm)
    body = {"version_id": source.pk, "kind": "quantize_weights", "options": options}
    r = owner_client.post("/api/v1/jobs", body, content_type="application/json")
    assert r.status_code == 422 and message in r.json()["error"]["message"], r.json()


@pytest.mark.django_db
def test_a_model_that_is_not_a_language_model_is_refused(owner_client, team, owner, tmp_path):
    from inference.services.registry import UploadedModel, model_version_upload

    path = colour_classifier(tmp_path / "c.onnx")
    upload = UploadedModel(name="colours", task="image-classification", model_chunks=[path.read_bytes()],
                           labels_text="red\ngreen\nblue")  # fmt: skip
    version = model_version_upload(team=team, actor=owner, upload=upload)
    body = {"version_id": version.pk, "kind": "quantize_weights", "options": {}}
    r = owner_client.post("/api/v1/jobs", body, content_type="application/json")
    assert r.status_code == 422 and "for text-generation models" in r.json()["error"]["message"]


@pytest.mark.django_db
def test_a_dataset_of_another_team_or_of_images_fails_the_job_with_the_reason(owner, team, outsider, tiny_lm):
    from evalsets.services import dataset_create
    from inference.jobs.runner import job_execute
    from inference.models import Job
    from inference.services.jobs import job_start
    from tests.evalsets.test_dataset_uploads import png, zipped

    source = _upload_lm(team, owner, tiny_lm)
    theirs = dataset_create(
        team=outsider.memberships.get().team,
        actor=outsider,
        name="theirs",
        kind="prompts",
        chunks=[b'{"prompt": "x"}\n'],
    )
    photos = dataset_create(
        team=team, actor=owner, name="photos", kind="images", chunks=[zipped({"a/1.png": png()})]
    )
    for dataset, reason in (
        (theirs, "not found in this team"),
        (photos, "is of kind images; this job needs one of kind texts or prompts"),
    ):
        job = job_start(
            team=team, actor=owner, source=source, kind="quantize_weights", options={"dataset_id": dataset.pk}
        )
        assert job_execute(job.pk) == "failed"
        assert reason in Job.objects.get(pk=job.pk).error
    assert source.model.versions.count() == 1
