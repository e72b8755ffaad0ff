"""The model manifest (contract.manifest): validated when built (write) and when parsed (read)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from contract.generation import GenerationSpec
from contract.manifest import ManifestError, ModelManifest, Preprocessing, Task

PREP = Preprocessing(input_size=(16, 16), resize_shorter=18, mean=(0.5,) * 3, std=(0.5,) * 3)
GENERATION = {"num_layers": 2, "num_kv_heads": 2, "head_dim": 16, "context_length": 64, "eos_token_ids": [2]}


def image(**overrides: object) -> ModelManifest:
    fields: dict = {"deployment": "colours", "task": Task.IMAGE_CLASSIFICATION, "model_version": "colours:1",
                    "labels": ("red", "green", "blue"), "preprocessing": PREP, "team_id": 3}  # fmt: skip
    return ModelManifest(**(fields | overrides))


def test_each_task_round_trips_through_json() -> None:
    manifests = [
        image(),
        ModelManifest(
            deployment="emb",
            task="feature-extraction",
            tokenizer_file="tokenizer.json",
            max_length=32,
            pooling="cls",
            normalize=False,
        ),  # fmt: skip
        ModelManifest(
            deployment="cls", task="text-classification", tokenizer_file="t.json", labels=("no", "yes")
        ),
        ModelManifest(
            deployment="chat",
            task="text-generation",
            tokenizer_file="t.json",
            generation=GenerationSpec.from_dict(GENERATION | {"chat_template": "{{ x }}"}),
        ),  # fmt: skip
    ]
    for manifest in manifests:
        assert ModelManifest.from_json(manifest.to_json()) == manifest


def test_the_json_keeps_the_field_names_runners_have_always_read() -> None:
    data = json.loads(image().to_json())
    assert data == {
        "deployment": "colours", "model_version": "colours:1", "task": "image-classification",
        "model_file": "model.onnx", "team_id": 3, "labels": ["red", "green", "blue"], "output": "logits",
        "preprocessing": {"input_size": [16, 16], "resize_shorter": 18, "mean": [0.5] * 3, "std": [0.5] * 3},
    }  # fmt: skip
    assert "labels" not in json.loads(image(labels=()).to_json())  # the agent adds the labels file


def test_an_old_minimal_manifest_still_reads_with_the_defaults() -> None:
    old = {"deployment": "d", "task": "image-classification", "model_file": "m.onnx", "unknown": 1,
           "preprocessing": {"input_size": [224, 224]}}  # fmt: skip
    manifest = ModelManifest.from_dict(old)
    assert manifest.model_version == "d" and manifest.team_id is None and manifest.labels == ()
    assert manifest.preprocessing == Preprocessing(
        (224, 224), 224, (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
    )


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: image(deployment=" "), "'deployment' must not be empty"),
        (lambda: image(task="speech"), "unsupported task 'speech'"),
        (lambda: image(preprocessing=None), "'preprocessing' must be an object"),
        (lambda: image(output="scores"), "'output' must be one of"),
        (lambda: image(labels=("a", 2)), "'labels' must be a list of strings"),
        (lambda: image(team_id="3"), "'team_id' must be an integer"),
        (lambda: replace(image(), model_file=""), "'model_file'"),
        (lambda: Preprocessing((16, 0), 18), "input_size must be two positive integers"),
        (lambda: Preprocessing((16, 16), 18, std=(0.5, 0.0, 0.5)), "std values must be > 0"),
        (lambda: ModelManifest(deployment="e", task="feature-extraction"), "'tokenizer_file' is required"),
        (lambda: ModelManifest(deployment="e", task="feature-extraction", tokenizer_file="t", max_length=1),
         "'max_length' must be >= 2"),
        (lambda: ModelManifest(deployment="e", task="feature-extraction", tokenizer_file="t", pooling="max"),
         "'pooling' must be one of"),
        (lambda: ModelManifest(deployment="g", task="text-generation", tokenizer_file="t"),
         "'generation' must be an object"),
        (lambda: GenerationSpec.from_dict(GENERATION | {"num_layers": 0}), "generation.num_layers"),
        (lambda: GenerationSpec.from_dict(GENERATION | {"eos_token_ids": ["x"]}), "generation.eos_token_ids"),
    ],
)  # fmt: skip
def test_a_producer_cannot_build_a_broken_manifest(build, message: str) -> None:
    with pytest.raises(ManifestError, match=message):
        build()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{oops", "not valid JSON"),
        ("[1]", "top level must be an object"),
        ('{"task": "image-classification"}', "missing field 'deployment'"),
        ('{"deployment": "d", "task": "image-classification", "model_file": 3}', "'model_file' has the wrong type"),
        ('{"deployment": "d", "task": "image-classification", "model_file": "m", "labels": "red",'
         ' "preprocessing": {"input_size": [8, 8]}}', "'labels' has the wrong type"),
        ('{"deployment": "d", "task": "image-classification", "model_file": "m",'
         ' "preprocessing": {"input_size": [8]}}', "preprocessing.input_size"),
        ('{"deployment": "d", "task": "feature-extraction", "model_file": "m", "tokenizer_file": "t",'
         ' "normalize": "yes"}', "'normalize' has the wrong type"),
    ],
)  # fmt: skip
def test_a_reader_refuses_a_broken_manifest_with_one_line(text: str, message: str) -> None:
    with pytest.raises(ManifestError, match=message) as caught:
        ModelManifest.from_json(text)
    assert "\n" not in str(caught.value)


def test_the_key_verify_key_travels_in_the_manifest_and_is_optional() -> None:
    base = {
        "deployment": "d",
        "task": "feature-extraction",
        "model_file": "m.onnx",
        "tokenizer_file": "t.json",
    }
    with_key = ModelManifest.from_json(json.dumps(base | {"key_verify_key": "abc"}))
    assert with_key.key_verify_key == "abc" and json.loads(with_key.to_json())["key_verify_key"] == "abc"
    without = ModelManifest.from_json(json.dumps(base))
    assert without.key_verify_key is None and "key_verify_key" not in without.to_dict()
    with pytest.raises(ManifestError, match="key_verify_key"):
        ModelManifest.from_json(json.dumps(base | {"key_verify_key": 5}))
