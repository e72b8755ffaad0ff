"""Job kinds and the job runner.

``registry`` holds the kinds (one class per kind, discovered from ``kinds/``), ``runner`` moves one job
row from queued to a terminal state, ``versions`` has the steps kinds share (read a version's files,
compare a converted model with its parent, store the result as a new version). The conversion code
itself is pure and lives in ``inference.conversion``.
"""
