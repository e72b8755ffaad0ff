"""Review finding L-K: a user deactivated with Django's `is_active=False` kept working management and
inference keys. Now their keys are refused wherever a key is checked (the management API with a 401
that says why, the console's `/v1/`, edges and runners); deactivating through `User.save()` revokes
them at once (tombstone and raised revision floor in Redis); a deactivation that skips `save()` is
refused by every database check and revoked by the minute sync; reactivation revives nothing."""

from __future__ import annotations

import asyncio

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from accounts import keycache
from accounts.models import ApiKey, AuditEvent
from accounts.services import api_key_create, api_keys_sync
from contract import apikeys
from contract.apikeys import INVALID_KEY_MESSAGE, TOMBSTONE
from tests.security.dataplane import call
from tests.security.key_readers import edge, edge_get, eventually, fresh_gateway, runner_keys, use_own_prefix
from tests.support.gateway import run

pytestmark = pytest.mark.django_db(transaction=True)  # on_commit runs, the gateway reads from its thread


@pytest.fixture(autouse=True)
def isolated(settings, monkeypatch):
    clean = use_own_prefix(settings)
    fresh_gateway(monkeypatch)
    yield
    clean()


def bearer(key: str) -> dict:
    return {"HTTP_AUTHORIZATION": f"Bearer {key}"}


def deactivate(user) -> None:
    user.is_active = False
    user.save()


def runner_lookup(key: str):
    async def lookup():
        cache, redis = runner_keys()
        try:
            return await cache.lookup(key)
        finally:
            await redis.aclose()

    return asyncio.run(lookup())


def test_l_k_a_deactivated_users_manage_key_gets_a_401_that_says_why(team, teammate) -> None:
    row, key = api_key_create(team=team, actor=teammate, name="ci", scopes=["manage"])
    assert Client().get("/api/v1/keys", **bearer(key)).status_code == 200
    deactivate(teammate)
    answer = Client().get("/api/v1/keys", **bearer(key))
    assert answer.status_code == 401
    assert answer.json()["error"] == {"type": "unauthorized", "message": apikeys.OWNER_INACTIVE_MESSAGE}
    # Only the holder of the real key learns that: a wrong secret gets the usual answer.
    wrong = Client().get("/api/v1/keys", **bearer(key[:-2] + ("zz" if not key.endswith("zz") else "yy")))
    assert wrong.status_code == 401 and wrong.json()["error"]["message"] != apikeys.OWNER_INACTIVE_MESSAGE


def test_l_k_deactivation_revokes_and_tombstones_keys_at_once_and_reactivation_revives_nothing(
    team, teammate
) -> None:
    row, key = api_key_create(team=team, actor=teammate, name="app", scopes=["inference"])
    assert runner_lookup(key) is not None

    async def before() -> None:
        assert (await call("GET", "/v1/models", key=key)).status == 200

    run(before)
    deactivate(teammate)
    row.refresh_from_db()
    assert row.revoked_at is not None and row.revision == 2
    assert keycache.cache_get(row.prefix) == TOMBSTONE  # at once, for every reader of Redis
    event = AuditEvent.objects.get(action="api_key.revoke", target=row.prefix)
    assert event.data == {"reason": "owner_deactivated"} and event.team == team
    assert runner_lookup(key) is None

    async def after() -> None:
        answer = await call("GET", "/v1/models", key=key)
        assert answer.status == 401 and answer.json()["error"]["message"] == INVALID_KEY_MESSAGE

    run(after)
    teammate.is_active = True
    teammate.save()
    assert ApiKey.objects.get(pk=row.pk).revoked_at is not None  # reactivation does not revive keys
    api_keys_sync()
    assert keycache.cache_get(row.prefix) == TOMBSTONE
    run(after)
    assert runner_lookup(key) is None


def test_l_k_the_edge_refuses_a_deactivated_users_key(team, teammate, tmp_path) -> None:
    _, key = api_key_create(team=team, actor=teammate, name="edge", scopes=["inference"])
    process = edge(tmp_path)
    try:
        assert edge_get(process, "/v1/models", key).status_code == 200
        deactivate(teammate)
        eventually(lambda: edge_get(process, "/v1/models", key).status_code == 401)  # within its 1 s cache
        assert edge_get(process, "/v1/models", key).json()["error"]["message"] == INVALID_KEY_MESSAGE
    finally:
        process.stop(10)


def test_l_k_a_deactivation_that_skips_save_is_refused_by_the_database_and_revoked_by_the_sync(
    team, teammate
) -> None:
    manage, manage_key = api_key_create(team=team, actor=teammate, name="m", scopes=["manage"])
    row, key = api_key_create(team=team, actor=teammate, name="i", scopes=["inference"])
    get_user_model().objects.filter(pk=teammate.pk).update(is_active=False)  # no post_save signal
    answer = Client().get("/api/v1/keys", **bearer(manage_key))
    assert answer.status_code == 401 and answer.json()["error"]["message"] == apikeys.OWNER_INACTIVE_MESSAGE
    keycache.cache_drop(row.prefix)  # a miss at the console's /v1/: the database is asked, and refuses

    async def refused() -> None:
        answer = await call("GET", "/v1/models", key=key)
        assert answer.status == 401 and answer.json()["error"]["message"] == INVALID_KEY_MESSAGE

    run(refused)
    api_keys_sync()  # the worker's minute sync revokes what the signal never saw
    assert set(ApiKey.objects.filter(created_by=teammate).values_list("revoked_at", flat=True)) - {None}
    assert not ApiKey.objects.filter(created_by=teammate, revoked_at__isnull=True).exists()
    assert keycache.cache_get(row.prefix) == TOMBSTONE and keycache.cache_get(manage.prefix) == TOMBSTONE
    assert runner_lookup(key) is None
    run(refused)
