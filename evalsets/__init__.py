"""Validation datasets a team uploads: labelled image sets, text sets and prompt sets (issue 12).

Checked like model uploads (size caps, hostile archives), stored content-addressed in the model store,
and laid out on disk for jobs by ``services.dataset_materialize``.
"""
