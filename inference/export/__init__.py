"""Exporters from training frameworks to the ONNX graphs the runner serves (these may import torch)."""
