"""Edge tests share one world: deployment ``colours`` with replica rows in hk and us (``tests.support.edges``)."""

from __future__ import annotations

import secrets
from pathlib import Path

import pytest

from accounts import keycache
from accounts.services import api_key_create
from inference.models import Deployment, Replica, ReplicaState
from inference.routes_publish import routes_publish_all
from inference.services.registry import UploadedModel, model_version_upload
from tests.support import hardware
from tests.support.edges import World
from tests.support.runners import image_manifest, write_manifest
from tests.support.tiny_models import COLOURS, colour_classifier


@pytest.fixture(autouse=True)
def own_prefix(settings):
    """Each test's routes and keys under a prefix of its own, removed afterwards."""
    settings.REDIS_PREFIX = f"edge-{secrets.token_hex(4)}"
    yield
    stale = list(keycache.client().scan_iter(match=f"{settings.REDIS_PREFIX}:*"))
    if stale:
        keycache.client().delete(*stale)


@pytest.fixture(scope="module")
def colour_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("colours")
    colour_classifier(folder / "model.onnx")
    return write_manifest(folder, image_manifest())


@pytest.fixture
def world(team, owner, tmp_path, colour_dir):
    """Deployment ``colours`` with replicas hk-a and hk-b on an hk node and us-a on a us node (rows only;
    tests start the runners they need), routes published, and an inference key."""
    upload = UploadedModel(name="colours", task="image-classification",
                           model_chunks=[(colour_dir / "model.onnx").read_bytes()], labels_text="\n".join(COLOURS))  # fmt: skip
    version = model_version_upload(team=team, actor=owner, upload=upload)
    deployment = Deployment.objects.create(team=team, name="colours", model_version=version)
    nodes = {"hk": hardware.node_hk_cpu(), "us": hardware.node_us_cpu()}
    _, key = api_key_create(team=team, actor=owner, name="edge", scopes=["inference"])
    w = World(deployment, key, colour_dir, tmp_path)
    for name in ("hk-a", "hk-b", "us-a"):
        w.replicas[name] = Replica.objects.create(deployment=deployment, node=nodes[name[:2]],
                                                  model_version=version, state=ReplicaState.STARTING)  # fmt: skip
    routes_publish_all()
    yield w
    w.stop()
    for name, process in [*w.edges.items(), *w.runners.items()]:
        assert "Traceback" not in process.last_output(100_000), name
