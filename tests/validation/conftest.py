"""These tests need no Django: they also run with ``-p no:django``."""

from __future__ import annotations

import pytest


@pytest.fixture
def settings():
    # tests/conftest.py's autouse fixture asks for pytest-django's ``settings``; a stand-in when it is off.
    return None
