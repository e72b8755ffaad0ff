"""Builders shared by the tests, split by what they build (fixtures stay in the ``conftest.py`` files).

- ``people``: users in teams (olivia the owner, tom the teammate, vera the viewer, oscar the outsider).
- ``hardware``: nodes named after their region and hardware (``node_hk_cpu``, ``node_us_gpu``).
- ``tiny_models``: real models small enough to build in a second (ONNX graphs, Hugging Face folders).
- ``factories``: request bodies and archives (images, zipped folders).
- ``regions``: the seeded regions (hk, us), restored after each transactional test's flush.
- ``stack`` and ``runners``: real processes (console, worker and node agent; runner subprocesses).
- ``ports``: local TCP ports.

Imported as ``tests.support.<module>``: the repository root is on ``sys.path`` (pytest's ``pythonpath``,
``python -m bench`` from the root).
"""
