"""``{{ job|kind_label }}``: a job kind's label from the registry (``Job.kind`` stores the name only)."""

from __future__ import annotations

from django import template

from inference.jobs.registry import kind_label as registry_kind_label

register = template.Library()


@register.filter
def kind_label(job) -> str:
    return registry_kind_label(job.kind)
