from __future__ import annotations

import pytest
from stack import Stack


@pytest.fixture(scope="session")
def stack(tmp_path_factory):
    """Console, worker and one HK node agent, started once for all end-to-end tests."""
    s = Stack(tmp_path_factory.mktemp("stack"))
    try:
        s.start()
        s.start_node("local", "hk")
        yield s
    finally:
        s.stop()
