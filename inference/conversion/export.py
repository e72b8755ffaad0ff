"""Export Hugging Face folders and TorchScript modules to ONNX (opset 17, dynamic batch and token axes).

Sources are sniffed again here (``inference.validation.formats``): a worker never trusts that the
upload check ran. HF weights load from safetensors only, with remote code off; TorchScript loads
with ``torch.jit.load``, which runs the archive's code and has no safe mode: call this only inside
the sandbox (``inference.sandbox``, docs/security.md "Untrusted models"), never in the worker.
"""

from __future__ import annotations

import importlib
import inspect
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from inference.conversion.graph import model_report
from inference.conversion.steps import Cancelled, Progress, Steps, job_steps
from inference.validation.formats import InvalidModel, sniff

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedModel

OPSET = 17
TEXT_INPUTS = ("input_ids", "attention_mask", "token_type_ids")
HF_TASKS = ("image-classification", "text-classification", "feature-extraction", "text-generation")


def export_onnx(
    src: Path,
    out_dir: Path,
    task: str | None = None,
    progress: Progress | None = None,
    cancelled: Cancelled | None = None,
    *,
    input_shape: Sequence[int] | None = None,
) -> dict[str, Any]:
    """Write ``out_dir/model.onnx`` (plus tokenizer.json for text) and return its report.

    ``task`` defaults to the one detected from an HF config; TorchScript needs ``input_shape``
    (e.g. [1, 3, 224, 224]; the first axis is exported as a dynamic batch axis).
    """
    info = sniff(Path(src))
    with job_steps(out_dir, progress, cancelled) as step:
        Path(out_dir).mkdir(parents=True, exist_ok=True)
        if info["format"] == "huggingface":
            report = _export_hf(info, Path(out_dir), task or info["task"], step)
        elif info["format"] == "torchscript":
            report = _export_torchscript(info["path"], Path(out_dir), task, input_shape, step)
        else:
            raise InvalidModel(f"{Path(src).name} is already ONNX; nothing to export")
    return report


def _export_hf(info: dict[str, Any], out_dir: Path, task: str, step: Steps) -> dict[str, Any]:
    if task not in HF_TASKS:
        raise InvalidModel(f"cannot export task {task!r} from a Hugging Face folder")
    if task == "text-generation":
        return _export_causal_lm(info["path"], out_dir, step)
    step(10, f"loading {info['architecture']} from safetensors")
    model = _load_hf(info["path"], task)
    step(40, "exporting to ONNX")
    path = out_dir / "model.onnx"
    if task == "image-classification":
        names = _export_image(model, path, info.get("preprocessing"))
    else:
        names = _export_text(model, path, task)
    step(85, "saving the tokenizer" if task != "image-classification" else "checking the graph")
    extra = {} if task == "image-classification" else {"tokenizer": _save_tokenizer(info["path"], out_dir)}
    report = model_report(path, precision="fp32", options={"source": "huggingface", "opset": OPSET})
    return (
        report
        | {
            "task": task,
            "labels": info["labels"],
            "preprocessing": info.get("preprocessing"),
            "input_names": names,
        }
        | extra
    )


def _load_hf(folder: Path, task: str) -> PreTrainedModel:
    import transformers

    auto = {
        "image-classification": transformers.AutoModelForImageClassification,
        "text-classification": transformers.AutoModelForSequenceClassification,
        "feature-extraction": transformers.AutoModel,
    }[task]
    model: PreTrainedModel = auto.from_pretrained(  # the auto classes return Any
        str(folder), local_files_only=True, trust_remote_code=False, use_safetensors=True
    )
    model.eval()  # type: ignore[no-untyped-call]  # transformers leaves PreTrainedModel.eval unannotated
    return model


def _first_output(model: PreTrainedModel, names: Sequence[str]) -> torch.nn.Module:
    """Wrap an HF model so the exported graph takes positional inputs and returns one tensor."""
    import torch

    class FirstOutput(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, *args: torch.Tensor) -> torch.Tensor:
            first: torch.Tensor = self.model(**dict(zip(names, args, strict=True)), return_dict=False)[0]
            return first

    return FirstOutput().eval()


def _export_image(model: PreTrainedModel, path: Path, preprocessing: dict[str, Any] | None) -> list[str]:
    import torch

    height, width = (preprocessing or {}).get("input_size") or _image_size(model)
    dummy = torch.zeros(
        1, model.config.num_channels if hasattr(model.config, "num_channels") else 3, height, width
    )
    _torch_export(
        _first_output(model, ["pixel_values"]),
        (dummy,),
        path,
        ["pixel_values"],
        ["logits"],
        {"pixel_values": {0: "batch"}, "logits": {0: "batch"}},
    )
    return ["pixel_values"]


def _image_size(model: PreTrainedModel) -> tuple[int, int]:
    size = getattr(model.config, "image_size", 224)
    return (size, size) if isinstance(size, int) else tuple(size)


def _export_text(model: PreTrainedModel, path: Path, task: str) -> list[str]:
    import torch

    accepted = inspect.signature(model.forward).parameters
    names = [name for name in TEXT_INPUTS if name in accepted]
    ids = torch.ones(2, 8, dtype=torch.long)
    dummies = {
        "input_ids": ids,
        "attention_mask": torch.ones_like(ids),
        "token_type_ids": torch.zeros_like(ids),
    }
    output = "logits" if task == "text-classification" else "last_hidden_state"
    axes = {name: {0: "batch", 1: "tokens"} for name in names}
    axes[output] = {0: "batch"} if output == "logits" else {0: "batch", 1: "tokens"}
    _torch_export(_first_output(model, names), tuple(dummies[n] for n in names), path, names, [output], axes)
    return names


def _torch_export(
    module: torch.nn.Module,
    args: tuple[torch.Tensor, ...],
    path: Path,
    inputs: Sequence[str],
    outputs: Sequence[str],
    axes: dict[str, dict[int, str]],
) -> None:
    import torch

    with torch.no_grad():
        torch.onnx.export(
            module,
            args,
            str(path),
            input_names=list(inputs),
            output_names=list(outputs),
            dynamic_axes=axes,
            opset_version=OPSET,
            dynamo=False,
        )


def _save_tokenizer(folder: Path, out_dir: Path) -> str | None:
    """Copy tokenizer.json, or write one from a fast tokenizer built from vocab files (no remote code)."""
    target = out_dir / "tokenizer.json"
    if (folder / "tokenizer.json").is_file():
        shutil.copyfile(folder / "tokenizer.json", target)
        return str(target)
    from transformers import AutoTokenizer

    # transformers leaves AutoTokenizer.from_pretrained unannotated
    tokenizer = AutoTokenizer.from_pretrained(  # type: ignore[no-untyped-call]
        str(folder), local_files_only=True, trust_remote_code=False
    )
    if not getattr(tokenizer, "is_fast", False):
        return None
    tokenizer.backend_tokenizer.save(str(target))
    return str(target)


def _export_causal_lm(folder: Path, out_dir: Path, step: Steps) -> dict[str, Any]:
    try:
        causal_lm = importlib.import_module("inference.export.causal_lm")
    except ModuleNotFoundError:
        raise NotImplementedError(
            "text-generation export lives in inference.export.causal_lm, which is not installed yet"
        ) from None
    if not (folder / "tokenizer.json").is_file():
        raise InvalidModel("a text-generation model needs tokenizer.json (a fast tokenizer)")
    step(10, "exporting the causal LM with its key/value cache")
    try:
        layout = causal_lm.export_onnx(folder, out_dir / "model.onnx")
    except ValueError as exc:  # unsupported architecture
        raise InvalidModel(str(exc)) from None
    step(85, "saving the tokenizer and generation settings")
    shutil.copyfile(folder / "tokenizer.json", out_dir / "tokenizer.json")
    report = model_report(
        out_dir / "model.onnx", precision="fp32", options={"source": "huggingface", "opset": OPSET}
    )
    return report | {
        "task": "text-generation",
        "labels": [],
        "tokenizer": str(out_dir / "tokenizer.json"),
        "generation": causal_lm.generation_section(folder, layout),
    }


def _export_torchscript(
    path: Path, out_dir: Path, task: str | None, input_shape: Sequence[int] | None, step: Steps
) -> dict[str, Any]:
    import torch

    if not input_shape or len(input_shape) < 2 or any(int(d) < 1 for d in input_shape):
        raise InvalidModel("exporting TorchScript needs an example input shape, e.g. [1, 3, 224, 224]")
    step(10, "loading the TorchScript module")
    try:
        # torch.jit.load is unannotated
        module = torch.jit.load(str(path), map_location="cpu").eval()  # type: ignore[no-untyped-call]
    except RuntimeError as exc:
        raise InvalidModel(f"the TorchScript archive does not load: {str(exc).strip()[:300]}") from None
    step(40, "exporting to ONNX")
    target = out_dir / "model.onnx"
    dummy = torch.zeros(*[int(d) for d in input_shape])
    _torch_export(
        module, (dummy,), target, ["input"], ["output"], {"input": {0: "batch"}, "output": {0: "batch"}}
    )
    report = model_report(
        target, precision="fp32", options={"source": "torchscript", "input_shape": list(input_shape)}
    )
    return report | {"task": task, "input_names": ["input"]}
