"""API-key governance on the console side: the management API checks keys against PostgreSQL only, every
bad key gets one 401 body, expiry, legacy SHA-256 rows upgraded on use, pepper rotation, the revocation
race, limits set and changed through the API, and usage rolled up into PostgreSQL."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.conf import settings
from django.test import Client
from django.utils import timezone

from accounts import keycache, keyhash, usage
from accounts.models import ApiKey, ApiKeyUsage, ApiKeyUsageBatch
from accounts.services import api_key_cache_miss, api_key_check, api_key_create, api_key_revoke
from contract.apikeys import (
    HASH_SCHEME_LEGACY,
    TOMBSTONE,
    entry_open,
    entry_sign,
    key_generate,
    key_hash,
    key_hmac,
)
from contract.quotas import month_of
from contract.signing import signing_key_from_secret

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _clean_redis():
    """Each test starts with no key entries, counters or last uses under this install's prefix (row ids
    restart with each test database, so counters left by an earlier run would add up)."""

    def clean() -> None:
        stale = list(keycache.client().scan_iter(match=f"{settings.REDIS_PREFIX}:*"))
        if stale:
            keycache.client().delete(*stale)

    clean()
    yield
    clean()


def bearer(clear: str) -> dict:
    return {"HTTP_AUTHORIZATION": f"Bearer {clear}"}


def manage_key(team, owner, **limits) -> tuple[ApiKey, str]:
    return api_key_create(team=team, actor=owner, name="m", scopes=["manage", "inference"], **limits)


def test_a_forged_redis_entry_never_opens_the_management_api(team, owner):
    """H1: whoever can write Redis writes an entry for a key the database never issued; the management
    API does not read Redis at all, so it answers 401 whatever the entry says or is signed with."""
    real, _ = manage_key(team, owner)
    forged, prefix = key_generate()
    for signer in (signing_key_from_secret("attacker"), keyhash.signer()):  # even a valid signature
        entry = entry_sign(signer, settings.REDIS_PREFIX, prefix=prefix, digest=key_hash(forged),
                           key_id=real.pk, team_id=team.pk, scopes=["manage"])  # fmt: skip
        keycache.client().set(keycache.names().api_key(prefix), entry)
        r = Client().get("/api/v1/keys", **bearer(forged))
        assert r.status_code == 401 and r.json()["error"]["type"] == "unauthorized"
    unsigned = json.dumps({"key_id": real.pk, "team_id": team.pk, "scopes": ["manage"]})
    keycache.client().set(keycache.names().api_key(prefix), unsigned)
    assert Client().get("/api/v1/keys", **bearer(forged)).status_code == 401


def test_every_bad_key_gets_the_same_401_body_at_the_management_api(team, owner):
    good, clear = manage_key(team, owner)
    revoked_row, revoked = manage_key(team, owner)
    api_key_revoke(team=team, actor=owner, key_id=revoked_row.pk)
    expired_row, expired = manage_key(team, owner)
    ApiKey.objects.filter(pk=expired_row.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    wrong_secret = clear[:-4] + ("AAAA" if not clear.endswith("AAAA") else "BBBB")
    unknown = key_generate()[0]
    bodies = {
        name: Client().get("/api/v1/keys", **bearer(k))
        for name, k in {
            "malformed": "lt_nope",
            "unknown": unknown,
            "wrong": wrong_secret,
            "revoked": revoked,
            "expired": expired,
        }.items()  # fmt: skip
    }
    assert {r.status_code for r in bodies.values()} == {401}
    assert len({r.content for r in bodies.values()}) == 1, {k: r.content for k, r in bodies.items()}
    assert Client().get("/api/v1/keys", **bearer(clear)).status_code == 200


def test_a_manage_key_stops_working_when_its_creator_leaves_or_becomes_a_viewer(team, owner, teammate):
    _, clear = api_key_create(team=team, actor=teammate, name="t", scopes=["manage"])
    assert Client().get("/api/v1/keys", **bearer(clear)).status_code == 200
    teammate.memberships.filter(team=team).update(role="viewer")
    assert Client().get("/api/v1/keys", **bearer(clear)).status_code == 401
    teammate.memberships.filter(team=team).delete()
    assert Client().get("/api/v1/keys", **bearer(clear)).status_code == 401


def test_a_key_past_its_expiry_is_refused_and_its_entry_refused_by_readers(team, owner):
    row, clear = manage_key(team, owner, expires_at=timezone.now() + timedelta(hours=1))
    assert Client().get("/api/v1/keys", **bearer(clear)).status_code == 200
    entry = keycache.cache_put(row)
    cached = entry_open(entry, keyhash.signer().public_key(), settings.REDIS_PREFIX, row.prefix)
    assert cached is not None and cached.identity.expired(row.expires_at.timestamp())
    ApiKey.objects.filter(pk=row.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    assert Client().get("/api/v1/keys", **bearer(clear)).status_code == 401
    assert api_key_check(clear_key=clear) is None


def test_legacy_sha256_keys_still_work_and_are_rehashed_on_first_use(team, owner):
    clear, prefix = key_generate()
    row = ApiKey.objects.create(team=team, created_by=owner, name="old", prefix=prefix, key_hash=key_hash(clear),
                                hash_scheme=HASH_SCHEME_LEGACY, scopes=["manage", "inference"])  # fmt: skip
    entry = keycache.cache_put(row)  # the sync can build its entry before any use: the digest is the hash
    assert entry is not None
    assert Client().get("/api/v1/keys", **bearer(clear)).status_code == 200
    row.refresh_from_db()
    assert row.hash_scheme == keyhash.current_scheme() and row.key_hash == key_hmac(
        settings.KEY_PEPPER, clear
    )
    assert keyhash.cache_digest(row) == key_hash(clear)  # runners still check the same digest
    assert Client().get("/api/v1/keys", **bearer(clear)).status_code == 200
    assert Client().get("/api/v1/keys", **bearer(clear[:-1] + "x")).status_code == 401


def test_a_rotated_pepper_keeps_keys_working_while_listed_as_previous(team, owner):
    row, clear = manage_key(team, owner)
    old = settings.KEY_PEPPER
    settings.KEY_PEPPER, settings.KEY_PEPPERS_PREVIOUS = b"a brand new pepper", []
    try:
        assert api_key_check(clear_key=clear) is None  # the old pepper is forgotten: the key cannot verify
        settings.KEY_PEPPERS_PREVIOUS = [old]
        assert api_key_check(clear_key=clear) is not None
        row.refresh_from_db()
        assert row.key_hash == key_hmac(b"a brand new pepper", clear)  # rehashed under the new pepper
        settings.KEY_PEPPERS_PREVIOUS = []
        assert api_key_check(clear_key=clear) is not None and keyhash.cache_digest(row) == key_hash(clear)
    finally:
        settings.KEY_PEPPER, settings.KEY_PEPPERS_PREVIOUS = old, []


@pytest.mark.parametrize("revoke_first", [True, False], ids=["revoke-then-fill", "fill-then-revoke"])
def test_a_revocation_racing_a_cache_miss_always_leaves_the_key_refused(team, owner, revoke_first):
    """L3, both orders of the race: the miss read the row as active, then the revocation and the miss's
    write to the cache land in either order. The tombstone wins both times."""
    row, clear = manage_key(team, owner)
    keycache.cache_drop(row.prefix)
    seen_active = api_key_check(clear_key=clear)  # the miss's database read, before the revocation
    assert seen_active is not None
    if revoke_first:
        api_key_revoke(team=team, actor=owner, key_id=row.pk)
        assert keycache.cache_fill(seen_active) is None  # refused to overwrite the tombstone
    else:
        assert keycache.cache_fill(seen_active) is not None
        api_key_revoke(team=team, actor=owner, key_id=row.pk)
    assert keycache.cache_get(row.prefix) == TOMBSTONE
    assert api_key_cache_miss(clear_key=clear) is None
    assert keycache.cache_get(row.prefix) == TOMBSTONE


def test_unknown_prefixes_are_remembered_briefly_but_never_shadow_a_real_key(team, owner):
    unknown = key_generate()[0]
    assert api_key_cache_miss(clear_key=unknown) is None
    name = keycache.names().api_key(unknown[:11])
    assert keycache.client().get(name) == TOMBSTONE
    assert 0 < keycache.client().ttl(name) <= settings.APIKEY_NEGATIVE_TTL_S
    row, clear = manage_key(team, owner)
    keycache.cache_drop(row.prefix)
    wrong = clear[:-2] + ("zz" if not clear.endswith("zz") else "yy")
    assert api_key_cache_miss(clear_key=wrong) is None
    assert keycache.cache_get(row.prefix) != TOMBSTONE  # a wrong guess fills the real entry instead
    assert entry_open(keycache.cache_get(row.prefix), keyhash.signer().public_key(), settings.REDIS_PREFIX,
                      row.prefix) is not None  # fmt: skip


def test_limits_are_set_at_creation_changed_with_patch_and_checked(owner_client, team):
    r = owner_client.post("/api/v1/keys", {"name": "q", "deployments": ["colours", "colours"], "quota_requests": 3,
                                           "expires_at": (timezone.now() + timedelta(days=1)).isoformat()},
                          content_type="application/json")  # fmt: skip
    assert r.status_code == 201, r.content
    body = r.json()
    assert body["deployments"] == ["colours"] and body["quota_requests"] == 3 and body["expires_at"]
    key_id = body["id"]
    r = owner_client.patch(f"/api/v1/keys/{key_id}", {"deployments": [], "quota_images": 10},
                           content_type="application/json")  # fmt: skip
    assert r.status_code == 200 and r.json()["deployments"] == [] and r.json()["quota_requests"] == 3
    assert r.json()["quota_images"] == 10
    for bad, field in [({"deployments": ["Bad Name"]}, "deployments"), ({"quota_tokens": 0}, "quota_tokens"),
                       ({"expires_at": "2001-01-01T00:00:00Z"}, "expires_at")]:  # fmt: skip
        r = owner_client.patch(f"/api/v1/keys/{key_id}", bad, content_type="application/json")
        assert r.status_code == 422 and field in r.json()["error"]["message"]
    assert ApiKey.objects.get(pk=key_id).quota_tokens is None  # nothing half-written


def test_usage_rolls_up_into_postgres_once_and_survives_a_flushed_redis(owner_client, team, owner):
    row, _ = api_key_create(team=team, actor=owner, name="u", quota_requests=100)
    names, redis = keycache.names(), keycache.client()
    redis.hset(names.usage(row.pk), mapping={"requests": 7, "images": 5})
    redis.hset(names.usage_month(row.pk, month_of(timezone.now())), mapping={"requests": 7, "images": 5})
    redis.hset(
        names.last_use(row.pk), mapping={"at": f"{timezone.now().timestamp():.3f}", "addr": "203.0.113.9"}
    )
    assert usage.usage_rollup() == 1
    assert usage.usage_rollup() == 0  # nothing pending: a rerun adds nothing
    # A run that died after adding its batch but before deleting it leaves the rolling hash behind.
    batch = ApiKeyUsageBatch.objects.get().batch.split(":", 1)[1]
    redis.hset(names.usage_rolling(row.pk), mapping={"requests": 7, "images": 5, "batch": batch})
    assert usage.usage_rollup() == 0 and not redis.exists(names.usage_rolling(row.pk))
    totals = ApiKeyUsage.objects.get(api_key=row)
    assert (totals.requests, totals.images, totals.tokens) == (7, 5, 0)
    row.refresh_from_db()
    assert row.last_used_at is not None and row.last_used_address == "203.0.113.9"
    stale = list(redis.scan_iter(match=f"{settings.REDIS_PREFIX}:*"))
    redis.delete(*stale)  # FLUSHDB of this install's keys
    r = owner_client.get(f"/api/v1/keys/{row.pk}/usage")
    assert r.status_code == 200
    assert r.json()["month"] == {"requests": 7, "images": 5, "tokens": 0}
    assert [(d["requests"], d["images"]) for d in r.json()["days"]] == [(7, 5)]
    usage.usage_rollup()  # the month counter that quotas read is reseeded from the database
    month = redis.hgetall(names.usage_month(row.pk, month_of(timezone.now())))
    assert int(month[b"requests"]) == 7 and int(month[b"images"]) == 5


def test_usage_endpoint_is_team_scoped_and_checks_its_range(owner_client, team, owner, outsider):
    row, _ = api_key_create(team=team, actor=owner, name="u")
    assert owner_client.get(f"/api/v1/keys/{row.pk}/usage?days=0").status_code == 422
    other = Client()
    other.force_login(outsider)
    r = other.get(f"/api/v1/keys/{row.pk}/usage")
    assert r.status_code == 404 and r.json()["error"]["type"] == "not_found"


def test_the_management_api_notes_last_use_for_the_roll_up(team, owner):
    row, clear = manage_key(team, owner)
    assert Client().get("/api/v1/keys", REMOTE_ADDR="198.51.100.4", **bearer(clear)).status_code == 200
    usage.usage_rollup()
    row.refresh_from_db()
    assert row.last_used_address == "198.51.100.4" and row.last_used_at is not None


def test_members_change_only_their_own_keys_while_admins_change_anyones(team, owner, teammate):
    other, _ = api_key_create(team=team, actor=teammate, name="tom's")
    owners, _ = api_key_create(team=team, actor=owner, name="olivia's")
    member = Client()
    member.force_login(teammate)
    r = member.patch(f"/api/v1/keys/{owners.pk}", {"quota_requests": 1}, content_type="application/json")
    assert r.status_code == 403 and "key.manage_others" in r.json()["error"]["message"]
    assert ApiKey.objects.get(pk=owners.pk).quota_requests is None  # refused before any change
    r = member.patch(f"/api/v1/keys/{other.pk}", {"quota_requests": 5}, content_type="application/json")
    assert r.status_code == 200 and r.json()["quota_requests"] == 5
    boss = Client()
    boss.force_login(owner)
    r = boss.patch(f"/api/v1/keys/{other.pk}", {"quota_requests": 7}, content_type="application/json")
    assert r.status_code == 200 and r.json()["quota_requests"] == 7
