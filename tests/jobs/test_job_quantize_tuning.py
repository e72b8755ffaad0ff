"""Accuracy-aware INT8 tuning without Django: the candidate ladder, targets, host report, one tuning run."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from inference.conversion import hardware
from inference.conversion.quantize import recommended_options
from inference.conversion.sensitivity import edge_nodes, sensitive_nodes
from inference.conversion.tuning import TuningRun, candidates, parse_targets, tune
from tests.support.tiny_models import outlier_classifier

PREPROCESSING = {"input_size": [16, 16], "resize_shorter": 18, "mean": [0.5] * 3, "std": [0.25] * 3}
EPYC = "model name\t: AMD EPYC 7B13\nflags\t\t: fpu sse2 avx avx2 fma bmi2\n"
XEON = "model name\t: Intel Xeon\nflags\t\t: fpu avx2 avx512f avx512bw avx512_vnni amx_int8\n"


def photo_folder(folder: Path, count: int = 48) -> Path:
    """Small noisy images of random colours: a quick calibration and validation set."""
    from PIL import Image

    rng = np.random.default_rng(7)
    folder.mkdir()
    for index in range(count):
        colour = rng.integers(0, 256, 3)
        pixels = np.clip(colour + rng.normal(0, 40, (24, 24, 3)), 0, 255).astype(np.uint8)
        Image.fromarray(pixels).save(folder / f"{index:02d}.png")
    return folder


FIXED = {"method": "MinMax", "activation_type": "QUInt8", "quant_format": "QDQ", "weight_type": "QInt8"}


def test_candidates_keep_what_the_person_set_and_start_with_the_recommended():
    base = recommended_options("image-classification") | FIXED
    del base["mode"]
    found = candidates("static", base, set(FIXED) | {"reduce_range"}, vnni=True)
    assert found[0] == base
    assert all(c[key] == value for c in found for key, value in FIXED.items())
    assert [{k: v for k, v in c.items() if base.get(k) != v} for c in found[1:]] == [
        {"float_nodes": 4},
        {"float_nodes": 12},
    ]
    assert len(found) == len({str(sorted(c.items())) for c in found})  # no configuration twice


def test_hosts_without_vnni_try_the_saturation_fixes_first():
    base = recommended_options("image-classification")
    del base["mode"]
    plain, vnni = candidates("static", base, set(), vnni=False), candidates("static", base, set(), vnni=True)
    assert plain[1].get("reduce_range") is True and plain[2].get("weight_type") == "QUInt8"
    assert vnni[1]["method"] == "Percentile"
    assert {str(sorted(c.items())) for c in plain} == {str(sorted(c.items())) for c in vnni}


def test_hardware_report_names_the_instruction_sets(tmp_path):
    (tmp_path / "epyc").write_text(EPYC)
    (tmp_path / "xeon").write_text(XEON)
    epyc, xeon = hardware.describe(tmp_path / "epyc"), hardware.describe(tmp_path / "xeon")
    assert epyc["instruction_sets"] == ["AVX2"] and epyc["vnni"] is False and "EPYC" in epyc["cpu"]
    assert xeon["instruction_sets"] == ["AVX2", "AVX-512", "AVX512-VNNI", "AMX-INT8"] and xeon["vnni"] is True
    assert hardware.describe(tmp_path / "missing")["instruction_sets"] == []


def test_targets_name_what_is_wrong():
    assert parse_targets([{"metric": "cosine", "min": 0.99}])[0].describe() == "cosine >= 0.99"
    with pytest.raises(ValueError, match="unknown target metric 'speed'"):
        parse_targets([{"metric": "speed", "min": 2}])
    with pytest.raises(ValueError, match="needs a 'max' bound"):
        parse_targets([{"metric": "accuracy_drop", "min": 0.01}])


def test_error_analysis_and_edges_point_at_the_classifier(tmp_path):
    from inference.conversion.quantize import calibration_feeds, quantize_static_int8

    model = outlier_classifier(tmp_path / "m.onnx")
    photos = photo_folder(tmp_path / "photos")
    assert edge_nodes(model) == ["classifier", "stem"]
    quantize_static_int8(
        model,
        tmp_path / "q.onnx",
        task="image-classification",
        preprocessing=PREPROCESSING,
        calibration=photos,
    )
    feeds = calibration_feeds(model, "image-classification", photos, 16, PREPROCESSING, None)
    worst = sensitive_nodes(model, tmp_path / "q.onnx", feeds, 1, tmp_path)
    assert worst[0]["node"] == "classifier" and worst[0]["added_noise"] > 0


def test_tuning_stops_at_the_first_configuration_that_meets_the_target(tmp_path):
    model = outlier_classifier(tmp_path / "m.onnx")
    (tmp_path / "out").mkdir()
    photos = photo_folder(tmp_path / "photos")
    base = (
        recommended_options("image-classification")
        | FIXED
        | {"calibration": photos, "keep_float_edges": False}
    )
    del base["mode"]
    settings = candidates("static", base, set(FIXED), vnni=True)
    run = TuningRun(model, tmp_path / "out", "image-classification", "static", PREPROCESSING, dataset=photos)
    targets = parse_targets([{"metric": "top1_agreement", "min": 0.99}])
    report = tune(run, settings, targets, max_trials=4)
    first, last = report["trials"][0], report["trials"][-1]
    assert not first["met"] and first["agreement"]["top1_agreement"] < 0.9
    assert report["target_met"] and last["met"] and report["chosen"] == last["trial"] <= 3
    assert "classifier" in last["excluded"] and last["options"]["keep_float_edges"] is True
    assert [p.name for p in (tmp_path / "out").iterdir()] == [report["file"]]  # other trials removed
    assert set(report["latency"]["speedup"]) == {"1", "8"} and last["latency_ms"] > 0
    assert first["agreement"]["count"] == 48
    assert report["hardware"]["fastest_format"].startswith("QDQ")
