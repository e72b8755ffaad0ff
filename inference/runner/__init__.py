"""Lantau runner: a standalone process that serves one ONNX model version over HTTP.

It imports nothing from Django so that it starts fast and runs on a GPU host with only
onnxruntime, numpy, Pillow, tokenizers and aiohttp installed.
"""
