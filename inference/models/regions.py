"""Regions: where nodes run and deployments ask to run, defined by install administrators as data.

A region is a slug (``name``: lowercase letters, digits and dashes, at most 32 characters) with a name
for people (``display_name``) and a ``failover_order``: pages and the API list regions in that order, the
first is where a deployment that names none goes, and placement falls back to the other regions in that
order (``scheduler.scorers.other_region``). Nodes, join tokens and deployments hold the slug
(``region`` CharFields); ``services.regions`` refuses to delete a region while a node or a deployment
uses it. Migration 0008 seeds ``hk`` (Hong Kong) and ``us`` (United States).
"""

from __future__ import annotations

from django.core.validators import RegexValidator
from django.db import models

from contract.regions import REGION_NAME_MAX, REGION_NAME_RE, REGION_NAME_RULE


class Region(models.Model):
    name = models.CharField(
        max_length=REGION_NAME_MAX,
        unique=True,
        validators=[RegexValidator(REGION_NAME_RE, REGION_NAME_RULE)],
    )
    display_name = models.CharField(max_length=64)
    failover_order = models.IntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["failover_order", "name"]

    def __str__(self) -> str:
        return self.name
