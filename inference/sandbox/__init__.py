"""Run untrusted model code (format checks, conversion, first loads) in a confined child process.

TorchScript is code and onnxruntime parses hostile graphs in C++: neither may run in the worker, which
holds SECRET_KEY and the database and Redis credentials. ``box.Sandbox`` starts ``python -m
inference.sandbox.child`` with an allowlisted environment, no network, resource limits and, as root, an
unprivileged user; ``tasks`` names the only functions the child will run. Django-free on purpose.
"""

from inference.sandbox.box import (
    Sandbox,
    SandboxFailed,
    SandboxLimits,
    isolation,
    isolation_gaps,
    isolation_refusal,
)

__all__ = ["Sandbox", "SandboxFailed", "SandboxLimits", "isolation", "isolation_gaps", "isolation_refusal"]
