import pytest

from inference import liveness
from tests.inference.conftest import colour_version, node_hk_a10_24g, node_hk_cpu, node_us_cpu  # noqa: F401


@pytest.fixture
def member_client(teammate):
    from django.test import Client

    c = Client()
    c.force_login(teammate)
    return c


@pytest.fixture(autouse=True)
def _no_heartbeats_remembered():
    liveness.forget("hk-new")
    liveness.forget("hk-cpu-1")
