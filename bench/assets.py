"""What the benchmark serves and sends: EfficientNet-Lite0 as FP32 and INT8 ONNX, JPEGs of photos.

The FP32 model comes from ``inference.demo.efficientnet.export_onnx``; the INT8 copy is quantized
statically (QDQ, per-channel weights) with a small calibration set of scikit-image photos,
pre-processed exactly as the runner does it.
"""

from __future__ import annotations

import io
import logging
import warnings
from pathlib import Path

import numpy as np
from PIL import Image

from contract.manifest import MANIFEST_NAME, ModelManifest, Preprocessing, Task

log = logging.getLogger("bench.assets")

# Bundled with scikit-image (no download); colour photos of several sizes and JPEG complexities.
PHOTOS = ("astronaut", "chelsea", "coffee", "rocket", "immunohistochemistry", "hubble_deep_field")
CALIBRATION_EXTRA = ("colorwheel", "camera", "brick", "moon", "retina")
INPUT_NAME = "input"


def preprocessing() -> Preprocessing:
    from inference.demo.efficientnet import PREPROCESSING as P

    return Preprocessing.from_dict(P)


def _rgb(name: str) -> np.ndarray:
    import skimage.data

    array = getattr(skimage.data, name)()
    if array.ndim == 2:
        array = np.stack([array] * 3, axis=-1)
    return np.ascontiguousarray(array[..., :3].astype(np.uint8))


def jpeg(array: np.ndarray, quality: int = 90) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(array).save(buffer, "JPEG", quality=quality)
    return buffer.getvalue()


def photo_jpegs() -> list[bytes]:
    """The request bodies: one JPEG per photo (35 KB to 265 KB)."""
    return [jpeg(_rgb(name)) for name in PHOTOS]


def calibration_batches() -> list[np.ndarray]:
    """Pre-processed photos (and their mirror images) for static quantization, one per batch."""
    from inference.runner.preprocess import ImagePreprocessor

    prepare = ImagePreprocessor(preprocessing())
    arrays = []
    for name in PHOTOS + CALIBRATION_EXTRA:
        photo = _rgb(name)
        for variant in (photo, np.ascontiguousarray(photo[:, ::-1])):
            arrays.append(prepare(jpeg(variant))[None])
    return arrays


def export_fp32(folder: Path) -> Path:
    from inference.demo.efficientnet import export_onnx

    path = folder / "efficientnet-lite0-fp32.onnx"
    if not path.exists():
        with warnings.catch_warnings():  # the exporter is chatty
            warnings.simplefilter("ignore")
            export_onnx(path)
    return path


def quantize_int8(fp32: Path, folder: Path) -> Path:
    """Static INT8 (QDQ, per-channel weights, MinMax calibration on ~20 photos): a few seconds."""
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static
    from onnxruntime.quantization.shape_inference import quant_pre_process

    path = folder / "efficientnet-lite0-int8.onnx"
    if path.exists():
        return path

    class Photos(CalibrationDataReader):
        def __init__(self) -> None:
            self._batches = iter(calibration_batches())

        def get_next(self) -> dict[str, np.ndarray] | None:
            batch = next(self._batches, None)
            return None if batch is None else {INPUT_NAME: batch}

    prepared = folder / "efficientnet-lite0-prepared.onnx"
    quant_pre_process(str(fp32), str(prepared), skip_symbolic_shape=True)
    quantize_static(
        str(prepared), str(path), Photos(), quant_format=QuantFormat.QDQ, per_channel=True,
        activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8,
    )  # fmt: skip
    prepared.unlink(missing_ok=True)
    return path


def model_dir(folder: Path, model: Path, name: str, labels: list[str]) -> Path:
    """A runner model folder: the ONNX file (hard link or copy) and its ``lantau.json``."""
    from inference.demo.efficientnet import PREPROCESSING

    target = folder / f"runner-{name}"
    target.mkdir(exist_ok=True)
    onnx_path = target / "model.onnx"
    if not onnx_path.exists():
        try:
            onnx_path.hardlink_to(model)
        except OSError:
            onnx_path.write_bytes(model.read_bytes())
    manifest = ModelManifest(
        deployment=name, model_version=f"{name}:1", task=Task.IMAGE_CLASSIFICATION, model_file="model.onnx",
        labels=tuple(labels), preprocessing=Preprocessing.from_dict(PREPROCESSING),
    )  # fmt: skip
    (target / MANIFEST_NAME).write_text(manifest.to_json())
    return target


def prepare_models(folder: Path, names: list[str]) -> dict[str, Path]:
    """Export (and quantize) what ``names`` asks for; return {"fp32": path, "int8": path}."""
    fp32 = export_fp32(folder)
    models = {"fp32": fp32}
    if "int8" in names:
        models["int8"] = quantize_int8(fp32, folder)
    return {name: models[name] for name in names}
