"""Register the demo models (exported from packages on PyPI) and deploy them. Idempotent."""

import tempfile
import warnings
from pathlib import Path

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from accounts.selectors import membership_for
from inference.demo import efficientnet, minilm, tiny_chat
from inference.models import Deployment, RegisteredModel
from inference.services.deployments import DeploymentSpec, deployment_create
from inference.services.registry import UploadedModel, model_version_upload


def _chunks(path: Path):
    with open(path, "rb") as f:
        while chunk := f.read(1024 * 1024):
            yield chunk


class Command(BaseCommand):
    help = "Seed the demo models efficientnet-lite0 and minilm-l6 and their deployments."

    def add_arguments(self, parser):
        parser.add_argument("--user", default="admin")

    def handle(self, *args, user, **options):
        account = get_user_model().objects.filter(username=user).first()
        membership = membership_for(user=account) if account else None
        if membership is None:
            raise CommandError(f"user {user!r} with a team is needed first (run `manage.py ensure_admin`)")
        team = membership.team
        with tempfile.TemporaryDirectory() as tmp:
            self._image(team, account, Path(tmp))
            self._text(team, account, Path(tmp))
            self._chat(team, account, Path(tmp))

    def _version(self, team, account, name, make_upload):
        model = RegisteredModel.objects.filter(team=team, name=name).first()
        if model and model.versions.exists():
            return model.versions.order_by("-number").first()
        self.stdout.write(f"Exporting demo model {name} to ONNX…")
        with warnings.catch_warnings():
            warnings.simplefilter(
                "ignore"
            )  # the exporters' tracer warnings say nothing useful to a user here
            version = model_version_upload(team=team, actor=account, upload=make_upload())
        self.stdout.write(f"Registered {version} ({version.size_bytes / 1e6:.1f} MB)")
        return version

    def _deploy(self, team, account, name, version):
        if not Deployment.objects.filter(name=name).exists():
            deployment_create(
                team=team, actor=account, spec=DeploymentSpec(name=name, model_version_id=version.pk)
            )
            self.stdout.write(f"Deployment {name} created")

    def _image(self, team, account, tmp: Path):
        def upload():
            path = efficientnet.export_onnx(tmp / "efficientnet.onnx")
            return UploadedModel(
                name="efficientnet-lite0",
                task="image-classification",
                model_chunks=_chunks(path),
                labels_text="\n".join(efficientnet.imagenet_labels()),
                preprocessing=efficientnet.PREPROCESSING,
                description="EfficientNet-Lite0, ImageNet-1k (demo)",
            )

        self._deploy(
            team, account, "efficientnet-lite0", self._version(team, account, "efficientnet-lite0", upload)
        )

    def _text(self, team, account, tmp: Path):
        def upload():
            path = minilm.export_onnx(tmp / "minilm.onnx")
            return UploadedModel(
                name="minilm-l6",
                task="feature-extraction",
                model_chunks=_chunks(path),
                tokenizer_chunks=_chunks(minilm.model_folder() / "tokenizer.json"),
                description="all-MiniLM-L6-v2 sentence embeddings (demo)",
            )

        self._deploy(team, account, "minilm-l6", self._version(team, account, "minilm-l6", upload))

    def _chat(self, team, account, tmp: Path):
        def upload():
            self.stdout.write("Training the toy chat model (about a minute; it only knows a few dialogues)…")
            onnx_path, tokenizer, generation = tiny_chat.build_and_export(tmp / "tiny-chat")
            return UploadedModel(
                name="tiny-chat",
                task="text-generation",
                model_chunks=_chunks(onnx_path),
                tokenizer_chunks=_chunks(tokenizer),
                generation=generation,
                description="A toy chat model (0.4 M parameters) trained for seconds on a few "
                "dialogues bundled with Lantau: it shows streaming, not intelligence.",
            )

        self._deploy(team, account, "tiny-chat", self._version(team, account, "tiny-chat", upload))
