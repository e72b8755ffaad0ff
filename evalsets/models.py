"""A team's validation dataset: one stored blob in the normalised layout, plus what the page shows."""

from __future__ import annotations

from django.conf import settings
from django.db import models


class DatasetKind(models.TextChoices):
    IMAGES = "images", "Image set"
    TEXTS = "texts", "Text set"
    PROMPTS = "prompts", "Prompt set"


class Dataset(models.Model):
    """Immutable once stored: a new upload under another name replaces nothing.

    ``sha256`` names the blob in the model store: a zip of ``<label>/<file>`` (or flat files when
    unlabelled) for images, JSON Lines of ``{"text", "label"?}`` or ``{"prompt"}`` for the others.
    """

    team = models.ForeignKey("accounts.Team", on_delete=models.CASCADE, related_name="datasets")
    name = models.SlugField(max_length=64)
    kind = models.CharField(max_length=16, choices=DatasetKind.choices)
    description = models.TextField(blank=True)
    sha256 = models.CharField(max_length=64)
    size_bytes = models.BigIntegerField()
    item_count = models.PositiveIntegerField()
    labelled = models.BooleanField(default=False)
    class_counts = models.JSONField(default=dict, blank=True)  # label -> items, for labelled sets
    samples = models.JSONField(default=list, blank=True)  # a few thumbnails (data URIs) or texts
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]
        constraints = [models.UniqueConstraint(fields=["team", "name"], name="dataset_unique_team_name")]

    def __str__(self) -> str:
        return self.name
