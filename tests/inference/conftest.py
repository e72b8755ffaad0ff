import pytest
from factories import COLOURS, colour_classifier

from inference.models import Node
from inference.services.registry import UploadedModel, model_version_upload


@pytest.fixture
def colour_version(owner, team, tmp_path):
    path = colour_classifier(tmp_path / "c.onnx")
    upload = UploadedModel(name="colours", task="image-classification", model_chunks=[path.read_bytes()],
                           labels_text="\n".join(COLOURS))
    return model_version_upload(team=team, actor=owner, upload=upload)


def _node(name, region, *, status="online", gpus=(), max_replicas=8):
    return Node.objects.create(name=name, region=region, token_prefix=name, token_hash=name.ljust(64, "0"),
                               status=status, inventory={"cpus": 2, "gpus": list(gpus)}, max_replicas=max_replicas)


@pytest.fixture
def node_hk_cpu(db):
    return _node("hk-cpu-1", "hk")


@pytest.fixture
def node_us_cpu(db):
    return _node("us-cpu-1", "us")


@pytest.fixture
def node_us_gpu(db):
    return _node("us-gpu-1", "us", gpus=[{"index": 0, "name": "H200", "memory_total": 141 * 2**30}])


@pytest.fixture
def node_hk_offline(db):
    return _node("hk-cpu-down", "hk", status="offline")
