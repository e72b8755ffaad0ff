"""Shared fixtures: people (owner, teammate, viewer, outsider) and an isolated model store.

Tests that talk to real processes (console, worker, node agent, runners) use the `stack` fixture
from tests/integration; everything here runs in-process against the real PostgreSQL and Redis.
"""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _isolated_storage(request, tmp_path, settings):
    if "django_db_setup" in request.fixturenames or request.node.get_closest_marker("django_db"):
        settings.STORAGE_DIR = tmp_path / "storage"


def _person(username: str, team_name: str, role: str):
    from django.contrib.auth import get_user_model

    from accounts.models import Membership, Team

    user = get_user_model().objects.create_user(username=username, password="pw-" + username + "-123456")
    team, _ = Team.objects.get_or_create(name=team_name)
    Membership.objects.create(team=team, user=user, role=role)
    return user


@pytest.fixture
def owner(db):
    return _person("olivia", "acme", "owner")


@pytest.fixture
def teammate(db, owner):
    return _person("tom", "acme", "member")


@pytest.fixture
def viewer(db, owner):
    return _person("vera", "acme", "viewer")


@pytest.fixture
def outsider(db):
    return _person("oscar", "globex", "owner")


@pytest.fixture
def team(owner):
    return owner.memberships.get().team


@pytest.fixture
def owner_client(owner):
    from django.test import Client

    c = Client()
    c.force_login(owner)
    return c


@pytest.fixture(scope="session")
def stack(tmp_path_factory):
    """Console, worker and one HK node agent as real processes, started once for all end-to-end tests."""
    from stack import Stack

    s = Stack(tmp_path_factory.mktemp("stack"))
    try:
        s.start()
        s.start_node("local", "hk")
        yield s
    finally:
        s.stop()
