"""Demo models shipped inside PyPI packages, exported to ONNX for the quick start."""
