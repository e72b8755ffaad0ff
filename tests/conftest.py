"""Shared fixtures: people (owner, teammate, viewer, outsider) and an isolated model store.

Tests that talk to real processes (console, worker, node agent, runners) use the `stack` fixture
below; everything else runs in-process against the real PostgreSQL and Redis. The builders behind
these fixtures live in ``tests.support`` (``people``; ``stack`` for the processes).

`make test` runs the suite in two pytest-xdist workers (``--dist loadscope``): each module runs whole
in one worker, so its module-scoped fixtures are built once; each worker that runs a module using the
shared `stack` starts one for itself. Each worker has its own test database (pytest-django), Redis
prefix (``console.test_settings``) and stack (its own database and prefix, ``tests.support.stack``).
"""

from __future__ import annotations

import pytest
from django.db.models.signals import post_migrate

from tests.support import people, regions

# hk and us exist in every test, transactional ones included (their flush empties the table).
post_migrate.connect(regions.on_post_migrate, dispatch_uid="tests.support.regions")


@pytest.fixture(scope="session", autouse=True)
def _forget_worker_redis_keys():
    """An xdist worker's Redis prefix is its own for this run: delete what it left at the end."""
    yield
    import os

    from django.conf import settings

    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return
    from accounts import keycache

    client = keycache.client()
    stale = list(client.scan_iter(match=f"{settings.REDIS_PREFIX}:*", count=1000))
    for start in range(0, len(stale), 500):
        client.delete(*stale[start : start + 500])
    users = [u.decode() for u in client.execute_command("ACL", "USERS")]  # Redis users are global
    mine = [u for u in users if u.startswith(f"{settings.REDIS_PREFIX}-")]
    if mine:
        client.execute_command("ACL", "DELUSER", *mine)


@pytest.fixture(autouse=True)
def _isolated_storage(request, tmp_path, settings):
    if "django_db_setup" in request.fixturenames or request.node.get_closest_marker("django_db"):
        settings.STORAGE_DIR = tmp_path / "storage"


@pytest.fixture
def owner(db):
    return people.owner()


@pytest.fixture
def teammate(db, owner):
    return people.teammate()


@pytest.fixture
def viewer(db, owner):
    return people.viewer()


@pytest.fixture
def outsider(db):
    return people.outsider()


@pytest.fixture
def team(owner):
    return owner.memberships.get().team


@pytest.fixture
def install_admin(owner):
    """Olivia as an install administrator too (``accounts.install_admin``): she may run the fleet."""
    owner.is_staff = True
    owner.save(update_fields=["is_staff"])
    return owner


@pytest.fixture
def owner_client(owner):
    from django.test import Client

    c = Client()
    c.force_login(owner)
    return c


@pytest.fixture
def no_bake(settings):
    """Rollouts without the bake period (``LANTAU_ROLLOUT_BAKE_S``, 60 s by default): for tests that step
    through the replica-by-replica mechanics pass by pass."""
    settings.ROLLOUT_BAKE_S = 0


@pytest.fixture(scope="session")
def stack(tmp_path_factory):
    """Console, worker and one HK node agent as real processes, started once for all end-to-end tests."""
    from tests.support.stack import Stack

    s = Stack(tmp_path_factory.mktemp("stack"))
    try:
        s.start()
        s.start_node("local", "hk")
        yield s
    finally:
        s.stop()
