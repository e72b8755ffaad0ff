"""Seed deployments on a running `Stack` as a client (and, for chat, as an operator) would.

``deploy_colours`` uploads the colour classifier through the management API and deploys it;
``deploy_tiny_chat`` exports an untrained tiny Llama and registers it with ``manage.py shell`` (the API
has no upload path for an already exported text-generation model with its generation section), then
deploys it through the API. Both return once the caller may wait for the deployment to be ready.
"""

from __future__ import annotations

import json
from pathlib import Path

from inference.demo.tiny_chat import save_untrained
from inference.export.causal_lm import export_model_folder
from tests.support.tiny_models import COLOURS, colour_classifier

_REGISTER_CHAT = """
import json
from pathlib import Path
from django.contrib.auth import get_user_model
from accounts.selectors import membership_for
from inference.services.registry import UploadedModel, model_version_upload
args = json.loads({args!r})
user = get_user_model().objects.get(username=args["user"])
folder = Path(args["folder"])
upload = UploadedModel(
    name=args["name"],
    task="text-generation",
    model_chunks=[(folder / "model.onnx").read_bytes()],
    tokenizer_chunks=[(folder / "tokenizer.json").read_bytes()],
    generation=args["generation"],
)
version = model_version_upload(team=membership_for(user=user).team, actor=user, upload=upload)
print(version.pk)
"""


def deploy_colours(stack, manage_key: str, name: str, workdir: Path, replicas: int = 1) -> dict:
    """Upload the colour classifier as model ``name`` and deploy it under the same name."""
    path = colour_classifier(workdir / f"{name}.onnx")
    with stack.client(manage_key) as api:
        upload = api.post(
            "/api/v1/models",
            files={"file": (f"{name}.onnx", path.read_bytes(), "application/octet-stream")},
            data={
                "name": name,
                "task": "image-classification",
                "labels": "\n".join(COLOURS),
                "preprocessing": '{"mean": [0, 0, 0], "std": [1, 1, 1]}',
            },
        )
        assert upload.status_code == 201, upload.text
        created = api.post(
            "/api/v1/deployments",
            json={"name": name, "model_version_id": upload.json()["id"], "replicas": replicas},
        )
        assert created.status_code == 201, created.text
        return created.json()


def deploy_tiny_chat(
    stack, manage_key: str, username: str, name: str, workdir: Path, *, context: int = 128
) -> dict:
    """Export an untrained tiny Llama, register it for ``username``'s team and deploy it as ``name``.

    Its end-of-sequence logits are silenced, so a stream runs for ``max_tokens`` (up to ``context``)."""
    folder = workdir / name
    hf = save_untrained(folder / "hf", "llama", context=context, silence_eos=True)
    export_model_folder(hf, folder, deployment=name)
    manifest = json.loads((folder / "lantau.json").read_text())
    args = json.dumps(
        {"user": username, "name": name, "folder": str(folder), "generation": manifest["generation"]}
    )
    version_id = int(stack.manage("shell", "-c", _REGISTER_CHAT.format(args=args)).strip().splitlines()[-1])
    with stack.client(manage_key) as api:
        created = api.post("/api/v1/deployments", json={"name": name, "model_version_id": version_id})
        assert created.status_code == 201, created.text
        return created.json()


_DERIVE_INT8 = """
import json
from pathlib import Path
from inference.models import ModelVersion
from inference.services.registry import version_derive
args = json.loads({args!r})
parent = ModelVersion.objects.get(pk=args["parent"])
child = version_derive(parent=parent, actor=parent.model.team.memberships.get(user__username=args["user"]).user,
                       model_path=Path(args["path"]), precision="int8", report={{}},
                       lineage={{"kind": "quantize_int8", "options": {{"mode": "dynamic"}}}})
print(child.pk)
"""


def deploy_efficientnet_pair(
    stack, manage_key: str, username: str, prefix: str, workdir: Path
) -> tuple[str, str]:
    """The demo EfficientNet-Lite0 (ImageNet) uploaded as model ``prefix`` and its dynamic INT8 child (made with
    Lantau's own quantizer here, registered as the next version with ``manage.py shell`` rather than by a
    job, which would spend a minute comparing the two); deployed as ``<prefix>-fp32`` and ``<prefix>-int8``.
    A few seconds to build; returns the two deployment names once created (not yet ready)."""
    from inference.conversion.quantize import quantize_dynamic_int8
    from inference.demo import efficientnet

    fp32 = efficientnet.export_onnx(workdir / f"{prefix}-fp32.onnx")
    int8 = workdir / f"{prefix}-int8.onnx"
    quantize_dynamic_int8(fp32, int8)
    names = (f"{prefix}-fp32", f"{prefix}-int8")
    with stack.client(manage_key) as api:
        upload = api.post(
            "/api/v1/models",
            files={"file": ("efficientnet.onnx", fp32.read_bytes(), "application/octet-stream")},
            data={"name": prefix, "task": "image-classification", "labels": "\n".join(efficientnet.imagenet_labels()),
                  "preprocessing": json.dumps(efficientnet.PREPROCESSING)},
        )  # fmt: skip
        assert upload.status_code == 201, upload.text
        args = json.dumps({"parent": upload.json()["id"], "user": username, "path": str(int8)})
        child = int(stack.manage("shell", "-c", _DERIVE_INT8.format(args=args)).strip().splitlines()[-1])
        for name, version in zip(names, (upload.json()["id"], child), strict=True):
            created = api.post("/api/v1/deployments", json={"name": name, "model_version_id": version})
            assert created.status_code == 201, created.text
    return names


def deploy_tiny_embedder(stack, manage_key: str, name: str, workdir: Path) -> dict:
    """A one-layer untrained BERT encoder with MiniLM's tokenizer, uploaded and deployed as ``name``."""
    from tests.support.tiny_models import minilm_tokenizer, tiny_bert_onnx

    folder = workdir / name
    folder.mkdir(parents=True)
    tiny_bert_onnx(folder)
    with stack.client(manage_key) as api:
        upload = api.post(
            "/api/v1/models",
            files={"file": ("model.onnx", (folder / "model.onnx").read_bytes(), "application/octet-stream"),
                   "tokenizer": ("tokenizer.json", minilm_tokenizer().read_bytes(), "application/json")},
            data={"name": name, "task": "feature-extraction"},
        )  # fmt: skip
        assert upload.status_code == 201, upload.text
        created = api.post(
            "/api/v1/deployments", json={"name": name, "model_version_id": upload.json()["id"]}
        )
        assert created.status_code == 201, created.text
        return created.json()
