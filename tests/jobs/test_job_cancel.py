"""Jobs report progress, stop between steps when cancelled and leave no partial output behind."""

from __future__ import annotations

import pytest

from inference.conversion.evaluate import evaluate
from inference.conversion.export import export_onnx
from inference.conversion.graph import convert_fp16
from inference.conversion.quantize import quantize_static_int8, recommended_options
from inference.conversion.steps import JobCancelled
from tests.support.tiny_models import PREPROCESSING, tiny_cnn, tiny_vit_folder


def _cancel_after(checks: int):
    calls = {"n": 0}

    def cancelled() -> bool:
        calls["n"] += 1
        return calls["n"] > checks

    return cancelled


@pytest.fixture(scope="module")
def cnn(tmp_path_factory):
    return tiny_cnn(tmp_path_factory.mktemp("cnn") / "cnn.onnx")


@pytest.mark.parametrize("checks", [0, 2, 4])
def test_cancelled_quantization_stops_and_removes_its_output(cnn, tmp_path, checks):
    out = tmp_path / "q" / "model.onnx"
    out.parent.mkdir()
    with pytest.raises(JobCancelled):
        quantize_static_int8(
            cnn,
            out,
            task="image-classification",
            preprocessing=PREPROCESSING,
            calibration_limit=8,
            cancelled=_cancel_after(checks),
        )
    assert list((tmp_path / "q").iterdir()) == []  # no model, no scratch folder


def test_cancelled_export_removes_the_folder_it_created(tmp_path):
    folder = tiny_vit_folder(tmp_path / "vit")
    with pytest.raises(JobCancelled):
        export_onnx(folder, tmp_path / "out", cancelled=_cancel_after(2))
    assert not (tmp_path / "out").exists()


def test_cancelled_export_into_an_existing_folder_keeps_what_was_there(tmp_path):
    folder = tiny_vit_folder(tmp_path / "vit")
    (tmp_path / "out").mkdir()
    (tmp_path / "out/notes.txt").write_text("keep me")
    with pytest.raises(JobCancelled):
        export_onnx(folder, tmp_path / "out", cancelled=_cancel_after(3))  # after model.onnx is written
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["notes.txt"]


def test_cancelled_fp16_and_evaluation_stop(cnn, tmp_path):
    with pytest.raises(JobCancelled):
        convert_fp16(cnn, tmp_path / "h.onnx", cancelled=_cancel_after(3))
    assert not (tmp_path / "h.onnx").exists()
    with pytest.raises(JobCancelled):
        evaluate(cnn, cnn, "image-classification", preprocessing=PREPROCESSING, cancelled=_cancel_after(4))


def test_progress_is_reported_in_order_up_to_100(cnn, tmp_path):
    seen: list[tuple[float, str]] = []
    convert_fp16(cnn, tmp_path / "h.onnx", progress=lambda percent, message: seen.append((percent, message)))
    percents = [p for p, _ in seen]
    assert percents == sorted(percents) and percents[0] == 0 and percents[-1] == 100
    assert all(isinstance(m, str) and m for _, m in seen)


def test_recommended_options_are_fresh_copies():
    first = recommended_options("image-classification")
    first["exclude_nodes"].append("x")
    assert recommended_options("image-classification")["exclude_nodes"] == []
    with pytest.raises(ValueError, match="no recommended quantization"):
        recommended_options("speech")
