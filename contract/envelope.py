"""The JSON error body every Lantau HTTP API answers with: ``{"error": {"type", "message"}}``.

Built by the management API (``console.api``, ``core.errors``), the gateway (``inference.gateway``) and
the runners (``inference.runner.errors``); clients read ``error.type`` (stable) and ``error.message``.
"""

from __future__ import annotations


def error_envelope(type_: str, message: str) -> dict[str, dict[str, str]]:
    return {"error": {"type": type_, "message": message}}
