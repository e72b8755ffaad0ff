"""Review L-A: the node page showed every member the host name, private address, runtimes and edge
port that the API already hid from them. Now members see the node's capacity; install administrators
see where it is."""

from __future__ import annotations

import pytest
from django.test import Client

from tests.support import hardware

pytestmark = pytest.mark.django_db

SECRETS = (b"gpu-box-7.internal", b"10.1.2.3", b"onnxruntime 1.99", b"8443")


@pytest.fixture
def node(db):
    node = hardware.node("hk-gpu-7", "hk", gpus=[hardware.A10])
    node.inventory |= {"hostname": "gpu-box-7.internal", "advertise_host": "10.1.2.3", "cpus": 48,
                       "providers": ["onnxruntime 1.99"], "edge": {"port": 8443, "ready": True},
                       "memory_bytes": 64 * 2**30, "memory_available_bytes": 32 * 2**30}  # fmt: skip
    node.save()
    return node


def page(user, name: str) -> bytes:
    client = Client()
    client.force_login(user)
    response = client.get(f"/nodes/{name}/")
    assert response.status_code == 200
    return response.content


def test_l_a_a_member_sees_capacity_not_the_host(node, viewer) -> None:
    body = page(viewer, node.name)
    assert not [s for s in SECRETS if s in body]
    assert b"CPU cores" in body and b"NVIDIA A10" in body and b"free of 64.0 GiB" in body


def test_l_a_an_install_administrator_sees_the_host(node, install_admin) -> None:
    body = page(install_admin, node.name)
    assert all(s in body for s in SECRETS[:3])
