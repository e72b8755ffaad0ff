"""Quantization and FP16 of tiny models: valid, smaller, and compared with their parent."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from inference.conversion.benchmark import benchmark, compare_latency
from inference.conversion.evaluate import evaluate
from inference.conversion.export import export_onnx
from inference.conversion.graph import convert_fp16, optimize_graph
from inference.conversion.quantize import quantize_dynamic_int8, quantize_static_int8, recommended_options
from tests.support.tiny_models import PREPROCESSING, tiny_bert_folder, tiny_cnn, tiny_llama_folder


@pytest.fixture(scope="module")
def cnn(tmp_path_factory):
    return tiny_cnn(tmp_path_factory.mktemp("cnn") / "cnn.onnx")


@pytest.fixture(scope="module")
def bert(tmp_path_factory):
    folder = tmp_path_factory.mktemp("bert")
    export_onnx(tiny_bert_folder(folder / "hf"), folder / "onnx")
    return folder / "onnx"


def _int8_weights(path) -> int:
    return sum(1 for t in onnx.load(str(path)).graph.initializer if t.data_type == onnx.TensorProto.INT8)


@pytest.mark.parametrize(("method", "quant_format"), [("MinMax", "QDQ"), ("Entropy", "QOperator")])
def test_static_int8_of_an_image_model_is_smaller_and_agrees(cnn, tmp_path, method, quant_format):
    report = quantize_static_int8(
        cnn,
        tmp_path / "q.onnx",
        task="image-classification",
        preprocessing=PREPROCESSING,
        method=method,
        quant_format=quant_format,
        exclude_nodes=["/0/Conv"],
        calibration_limit=16,
    )
    onnx.checker.check_model(str(tmp_path / "q.onnx"))
    assert report["size_bytes"] < 0.5 * cnn.stat().st_size
    assert _int8_weights(tmp_path / "q.onnx") > 0
    assert report["options"]["method"] == method and report["options"]["excluded"] == ["/0/Conv"]
    assert report["options"]["calibration_inputs"] == 16
    metrics = evaluate(cnn, tmp_path / "q.onnx", "image-classification", preprocessing=PREPROCESSING)
    assert metrics["count"] >= 100
    assert 0.0 <= metrics["top1_agreement"] <= 1.0 and metrics["parent_top1_in_child_top5"] > 0.5


def test_static_int8_calibrates_on_a_folder_of_images(cnn, tmp_path):
    from PIL import Image

    (tmp_path / "cal").mkdir()
    for i in range(4):
        Image.fromarray(np.full((80, 90, 3), 40 * i, np.uint8)).save(tmp_path / "cal" / f"{i}.png")
    report = quantize_static_int8(
        cnn,
        tmp_path / "q.onnx",
        task="image-classification",
        preprocessing=PREPROCESSING,
        calibration=tmp_path / "cal",
    )
    assert report["options"]["calibration_inputs"] == 4


def test_dynamic_int8_of_a_text_model_keeps_embeddings_close(bert, tmp_path):
    options = recommended_options("feature-extraction")
    del options["mode"]
    report = quantize_dynamic_int8(bert / "model.onnx", tmp_path / "q.onnx", **options)
    assert report["size_bytes"] < (bert / "model.onnx").stat().st_size
    assert report["options"]["per_channel"] is True
    assert all("Gather" in name for name in report["options"]["excluded"])
    metrics = evaluate(
        bert / "model.onnx", tmp_path / "q.onnx", "feature-extraction", tokenizer=bert / "tokenizer.json"
    )
    assert metrics["mean_cosine"] > 0.9 and metrics["min_cosine"] <= metrics["mean_cosine"]


def test_static_int8_of_a_text_model_calibrates_on_text_lines(bert, tmp_path):
    (tmp_path / "lines.txt").write_text("the cat is in the park\n\nthe dog jumps over a fox\n")
    quantize_static_int8(
        bert / "model.onnx",
        tmp_path / "q.onnx",
        task="feature-extraction",
        tokenizer=bert / "tokenizer.json",
        calibration=tmp_path / "lines.txt",
    )
    metrics = evaluate(
        bert / "model.onnx",
        tmp_path / "q.onnx",
        "feature-extraction",
        tokenizer=bert / "tokenizer.json",
        dataset=tmp_path / "lines.txt",
    )
    assert metrics["count"] == 2


def test_fp16_keeps_float32_inputs_and_outputs(cnn, tmp_path):
    report = convert_fp16(cnn, tmp_path / "h.onnx")
    assert report["inputs"][0]["dtype"] == "float32" and report["outputs"][0]["dtype"] == "float32"
    assert report["size_bytes"] < 0.6 * cnn.stat().st_size
    x = np.random.default_rng(0).standard_normal((2, 3, 64, 64)).astype(np.float32)
    run = [
        ort.InferenceSession(str(p), providers=["CPUExecutionProvider"]).run(None, {"input": x})[0]
        for p in (cnn, tmp_path / "h.onnx")
    ]
    np.testing.assert_allclose(run[0], run[1], atol=1e-2)


def test_optimised_graph_and_benchmarks_report_latency(cnn, tmp_path):
    optimize_graph(cnn, tmp_path / "o.onnx")
    report = benchmark(tmp_path / "o.onnx", "image-classification", (1, 2), runs=4, rounds=2)
    assert set(report["batches"]) == {"1", "2"} and report["batches"]["2"]["p50_ms"] > 0
    pair = compare_latency(cnn, tmp_path / "o.onnx", "image-classification", (1,), runs=2, rounds=2)
    assert pair["speedup"]["1"] > 0


def test_causal_lm_export_quantize_and_next_token_agreement(tmp_path):
    exported = export_onnx(tiny_llama_folder(tmp_path / "hf"), tmp_path / "onnx")
    assert exported["task"] == "text-generation" and exported["generation"]["num_kv_heads"] == 2
    quantize_dynamic_int8(tmp_path / "onnx/model.onnx", tmp_path / "q.onnx")
    metrics = evaluate(
        tmp_path / "onnx/model.onnx",
        tmp_path / "q.onnx",
        "text-generation",
        tokenizer=tmp_path / "onnx/tokenizer.json",
        limit=8,
    )
    assert 0.0 <= metrics["next_token_agreement"] <= 1.0 and metrics["parent_perplexity"] > 1.0
    benchmark(tmp_path / "q.onnx", "text-generation", (1,), runs=2, rounds=1, sequence_length=8)
