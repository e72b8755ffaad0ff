"""Conversion, quantization, evaluation and benchmark steps: pure functions over paths, no Django.

Each function takes ``progress(percent, message)`` and ``cancelled() -> bool`` callables, checks
cancellation between steps (raising ``JobCancelled`` after removing its partial output) and
returns a JSON-ready report dict. Job kinds in ``inference.jobs.kinds`` call them; see
docs/quantization.md. Import the submodules directly (nothing is re-exported here).
"""
