"""The model registry: a team's models, their immutable versions, and the stored files behind them."""

from __future__ import annotations

from django.conf import settings
from django.db import models


class Task(models.TextChoices):
    IMAGE_CLASSIFICATION = "image-classification", "Image classification"
    TEXT_CLASSIFICATION = "text-classification", "Text classification"
    FEATURE_EXTRACTION = "feature-extraction", "Embeddings"
    TEXT_GENERATION = "text-generation", "Text generation"


class ModelFormat(models.TextChoices):
    ONNX = "onnx", "ONNX"
    TORCHSCRIPT = "torchscript", "TorchScript"
    HUGGINGFACE = "huggingface", "Hugging Face"


class RegisteredModel(models.Model):
    team = models.ForeignKey("accounts.Team", on_delete=models.CASCADE, related_name="models")
    name = models.SlugField(max_length=64)
    task = models.CharField(max_length=32, choices=Task.choices)
    description = models.TextField(blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]
        constraints = [models.UniqueConstraint(fields=["team", "name"], name="model_unique_team_name")]

    def __str__(self) -> str:
        return self.name


class ModelVersion(models.Model):
    """An immutable, validated model file plus what the runner needs to serve it."""

    model = models.ForeignKey(RegisteredModel, on_delete=models.CASCADE, related_name="versions")
    number = models.PositiveIntegerField()
    format = models.CharField(max_length=16, choices=ModelFormat.choices, default=ModelFormat.ONNX)
    precision = models.CharField(max_length=16, default="fp32")
    sha256 = models.CharField(max_length=64)
    size_bytes = models.BigIntegerField()
    inputs = models.JSONField(default=list)
    outputs = models.JSONField(default=list)
    labels = models.JSONField(default=list, blank=True)
    preprocessing = models.JSONField(default=dict, blank=True)
    runtime_config = models.JSONField(default=dict, blank=True)
    parent = models.ForeignKey(
        "self", on_delete=models.SET_NULL, null=True, blank=True, related_name="children"
    )
    lineage = models.JSONField(default=dict, blank=True)
    report = models.JSONField(default=dict, blank=True)  # size, latency and agreement against the parent
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["model__name", "-number"]
        constraints = [models.UniqueConstraint(fields=["model", "number"], name="version_unique_number")]

    def __str__(self) -> str:
        return f"{self.model.name}:{self.number}"

    @property
    def label(self) -> str:
        return str(self)


class Artifact(models.Model):
    """One file of a version, stored once by content hash (see inference.storage)."""

    version = models.ForeignKey(ModelVersion, on_delete=models.CASCADE, related_name="artifacts")
    role = models.CharField(max_length=32)  # "model", "tokenizer", ...
    filename = models.CharField(max_length=200)
    sha256 = models.CharField(max_length=64, db_index=True)
    size_bytes = models.BigIntegerField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["version", "filename"], name="artifact_unique_filename")
        ]
