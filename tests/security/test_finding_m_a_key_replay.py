"""Review finding M-A (its first part): anyone who could write Redis brought a revoked key back by writing
its old signed entry over the tombstone, for ever once the tombstone's TTL had passed; the same trick
dropped a rate limit added since. Each key now has a revision (bumped by every change and by
revocation) signed into its entry, and a signed revision floor per prefix that only rises: the
console's `/v1/`, edges and runners refuse an entry older than the floor, or than the highest revision
they have seen, and the minute sync rewrites the floors of keys revoked however long ago."""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta

import pytest
from asgiref.sync import sync_to_async
from django.utils import timezone

from accounts import keycache, keyhash
from accounts.models import ApiKey
from accounts.services import api_key_create, api_key_revoke, api_key_update, api_keys_sync
from contract import apikeys
from contract.apikeys import INVALID_KEY_MESSAGE, TOMBSTONE, entry_open
from tests.security.dataplane import call
from tests.security.key_readers import (
    edge,
    edge_get,
    entry_name,
    eventually,
    fresh_gateway,
    restart_gateway_memory,
    runner_keys,
    use_own_prefix,
)
from tests.support.gateway import run

pytestmark = pytest.mark.django_db(transaction=True)  # the gateway reads the database from its own thread


@pytest.fixture(autouse=True)
def isolated(settings, monkeypatch):
    clean = use_own_prefix(settings)
    fresh_gateway(monkeypatch)
    yield
    clean()


def redis_set(name: str, value) -> None:
    keycache.client().set(name, value)


def floor_name(prefix: str) -> str:
    return keycache.names().prefix + ":apikey-rev:" + prefix


def fresh_runner_lookup(key: str):
    """What a newly started runner or edge (nothing remembered) makes of the key."""

    async def lookup():
        cache, redis = runner_keys()
        try:
            return await cache.lookup(key)
        finally:
            await redis.aclose()

    return asyncio.run(lookup())


def test_m_a_an_old_entry_written_over_the_tombstone_does_not_revive_a_revoked_key_at_the_console(
    team, owner
) -> None:
    row, key = api_key_create(team=team, actor=owner, name="r")
    name = entry_name(row.prefix)

    async def scenario() -> None:
        assert (await call("GET", "/v1/models", key=key)).status == 200
        old = await sync_to_async(keycache.client().get)(name)
        await sync_to_async(api_key_revoke)(team=team, actor=owner, key_id=row.pk)
        assert (await call("GET", "/v1/models", key=key)).status == 401
        await sync_to_async(redis_set)(name, old)  # the replay
        answer = await call("GET", "/v1/models", key=key)
        assert answer.status == 401 and answer.json()["error"]["message"] == INVALID_KEY_MESSAGE
        # Once the tombstone's TTL has passed (it is gone) and in a newly started console process.
        await sync_to_async(keycache.client().delete)(name)
        await sync_to_async(redis_set)(name, old)
        restart_gateway_memory()
        assert (await call("GET", "/v1/models", key=key)).status == 401
        restart_gateway_memory()
        assert (await call("GET", "/v1/models", key=key)).status == 401

    run(scenario)
    assert fresh_runner_lookup(key) is None


def test_m_a_edges_and_runners_refuse_the_replayed_entry(team, owner, tmp_path) -> None:
    row, key = api_key_create(team=team, actor=owner, name="e")
    name, old = entry_name(row.prefix), keycache.cache_get(row.prefix)
    process = edge(tmp_path)
    try:
        assert edge_get(process, "/v1/models", key).status_code == 200
        api_key_revoke(team=team, actor=owner, key_id=row.pk)
        eventually(lambda: edge_get(process, "/v1/models", key).status_code == 401)
        redis_set(name, old)
        deadline = time.monotonic() + 1.5  # past the edge's one-second cache of Redis's answers
        while time.monotonic() < deadline:
            assert edge_get(process, "/v1/models", key).status_code == 401
            time.sleep(0.1)
    finally:
        process.stop(10)
    keycache.client().delete(name)  # the tombstone's TTL has passed
    redis_set(name, old)
    assert fresh_runner_lookup(key) is None  # a runner or edge started afterwards refuses it too


def test_m_a_an_entry_from_before_a_rate_limit_was_added_is_not_taken(team, owner) -> None:
    row, key = api_key_create(team=team, actor=owner, name="l")
    name, unlimited = entry_name(row.prefix), keycache.cache_get(row.prefix)
    api_key_update(team=team, actor=owner, key_id=row.pk, changes={"rate_per_s": 0.01, "burst": 1})
    redis_set(name, unlimited)
    assert fresh_runner_lookup(key) is None  # the runners refuse the stale entry rather than drop the limit

    async def scenario() -> None:
        restart_gateway_memory()
        assert (await call("GET", "/v1/models", key=key)).status == 200  # the database refills the new entry
        assert (await call("GET", "/v1/models", key=key)).status == 429  # with the limit

    run(scenario)
    identity = fresh_runner_lookup(key)
    assert identity is not None and identity.rate_per_s == 0.01


def test_m_a_entries_and_floors_carry_the_signed_revision_that_every_change_bumps(team, owner) -> None:
    row, _ = api_key_create(team=team, actor=owner, name="v")
    verifier, namespace = keyhash.signer().public_key(), keycache.names().prefix

    def signed_revisions() -> tuple[int | None, int | None]:
        raw = keycache.cache_get(row.prefix)
        cached = entry_open(raw, verifier, namespace, row.prefix) if raw not in (None, TOMBSTONE) else None
        floor = keycache.client().get(floor_name(row.prefix))
        return (
            cached.revision if cached is not None else None,
            apikeys.floor_open(floor, verifier, namespace, row.prefix) if floor is not None else None,
        )

    assert signed_revisions() == (1, 1)
    api_key_update(team=team, actor=owner, key_id=row.pk, changes={"quota_requests": 10})
    assert ApiKey.objects.get(pk=row.pk).revision == 2 and signed_revisions() == (2, 2)
    api_key_revoke(team=team, actor=owner, key_id=row.pk)
    assert ApiKey.objects.get(pk=row.pk).revision == 3 and signed_revisions() == (None, 3)
    floor = keycache.client().get(floor_name(row.prefix))
    forged = b"r1.1." + floor.split(b".", 2)[2]  # a lower revision under the real signature
    assert apikeys.floor_open(forged, verifier, namespace, row.prefix) is None
    assert apikeys.floor_open(floor, verifier, namespace, "lt_00000000") is None  # another key's floor


def test_m_a_the_sync_rewrites_the_floors_of_keys_revoked_long_ago(team, owner) -> None:
    row, key = api_key_create(team=team, actor=owner, name="s")
    name, old = entry_name(row.prefix), keycache.cache_get(row.prefix)
    api_key_revoke(team=team, actor=owner, key_id=row.pk)
    ApiKey.objects.filter(pk=row.pk).update(revoked_at=timezone.now() - timedelta(days=30))
    keycache.client().delete(name, floor_name(row.prefix))  # the attacker removes tombstone and floor
    api_keys_sync()  # a month after the revocation, the sync still writes its floor back
    redis_set(name, old)
    assert fresh_runner_lookup(key) is None


def test_m_a_a_reader_that_saw_the_floor_refuses_the_replay_even_if_the_floor_is_deleted(team, owner) -> None:
    row, key = api_key_create(team=team, actor=owner, name="m")
    name, old = entry_name(row.prefix), keycache.cache_get(row.prefix)

    async def scenario() -> None:
        cache, redis = runner_keys(ttl_s=0)
        try:
            assert await cache.lookup(key) is not None
            await sync_to_async(api_key_revoke)(team=team, actor=owner, key_id=row.pk)
            assert await cache.lookup(key) is None  # it reads the tombstone and the floor
            await redis.delete(name, floor_name(row.prefix))
            await redis.set(name, old)
            assert await cache.lookup(key) is None  # it remembers the revision it saw
        finally:
            await redis.aclose()

    asyncio.run(scenario())
