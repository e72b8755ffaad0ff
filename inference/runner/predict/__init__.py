"""Predict (image and text classification, embeddings) and OpenAI-compatible embeddings routes.

``routes`` (HTTP only) -> ``protocol`` (request parsing, response shapes) -> ``serving`` (pre-process,
batch, post-process), the same split as ``generation/``.
"""
