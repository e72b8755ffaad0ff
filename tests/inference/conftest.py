import pytest

from inference.services.registry import UploadedModel, model_version_upload
from tests.support import hardware
from tests.support.tiny_models import COLOURS, colour_classifier


@pytest.fixture
def colour_version(owner, team, tmp_path):
    path = colour_classifier(tmp_path / "c.onnx")
    upload = UploadedModel(
        name="colours",
        task="image-classification",
        model_chunks=[path.read_bytes()],
        labels_text="\n".join(COLOURS),
    )
    return model_version_upload(team=team, actor=owner, upload=upload)


@pytest.fixture
def node_hk_cpu(db):
    return hardware.node_hk_cpu()


@pytest.fixture
def node_us_cpu(db):
    return hardware.node_us_cpu()


@pytest.fixture
def node_us_gpu(db):
    return hardware.node_us_gpu()


@pytest.fixture
def node_hk_offline(db):
    return hardware.node_hk_offline()


@pytest.fixture
def node_hk_a10_24g(db):
    return hardware.node_hk_a10_24g()


@pytest.fixture
def node_hk_a10_busy(db):
    return hardware.node_hk_a10_busy()


@pytest.fixture
def node_hk_two_t4(db):
    return hardware.node_hk_two_t4()
