import pytest
from django.conf import settings
from django.test import Client

from accounts import keycache, keyhash
from accounts.models import ApiKey, AuditEvent
from accounts.services import api_key_check
from contract.apikeys import TOMBSTONE, entry_open, key_hash, key_hmac

pytestmark = pytest.mark.django_db


def test_created_key_is_shown_once_and_stored_only_as_hash(owner_client, team):
    r = owner_client.post(
        "/api/v1/keys", {"name": "ci", "scopes": ["inference"]}, content_type="application/json"
    )
    assert r.status_code == 201
    clear = r.json()["key"]
    stored = ApiKey.objects.get(team=team)
    assert stored.key_hash == key_hmac(settings.KEY_PEPPER, clear) and clear.startswith(stored.prefix)
    assert stored.hash_scheme == keyhash.current_scheme()
    row = str(ApiKey.objects.filter(pk=stored.pk).values().get())
    assert clear not in row and key_hash(clear) not in row  # not even the unkeyed digest is stored in clear
    assert keyhash.cache_digest(stored) == key_hash(clear)  # but the console can rebuild the Redis entry
    listed = owner_client.get("/api/v1/keys").json()
    assert listed[0]["prefix"] == stored.prefix and "key" not in listed[0]
    assert AuditEvent.objects.filter(action="api_key.create", team=team).exists()


def test_revoked_key_no_longer_authenticates_even_when_cached(owner_client, team):
    clear = owner_client.post("/api/v1/keys", {"name": "k"}, content_type="application/json").json()["key"]
    stored = ApiKey.objects.get(team=team)
    assert api_key_check(clear_key=clear) is not None
    assert keycache.cache_put(stored) is not None  # cached in Redis
    r = owner_client.delete(f"/api/v1/keys/{stored.pk}")
    assert r.status_code == 200 and r.json()["revoked_at"]
    assert api_key_check(clear_key=clear) is None
    assert keycache.cache_get(stored.prefix) == TOMBSTONE  # readers of Redis refuse it without the database


def test_viewer_cannot_create_keys(client, viewer):
    client.force_login(viewer)
    r = client.post("/api/v1/keys", {"name": "nope"}, content_type="application/json")
    assert r.status_code == 403 and r.json()["error"]["type"] == "forbidden"


def test_outsider_cannot_revoke_another_teams_key(owner_client, outsider, team):
    owner_client.post("/api/v1/keys", {"name": "k"}, content_type="application/json")
    key_id = ApiKey.objects.get(team=team).pk
    other = Client()
    other.force_login(outsider)
    assert other.delete(f"/api/v1/keys/{key_id}").status_code == 404
    assert ApiKey.objects.get(pk=key_id).revoked_at is None


def test_unknown_scope_and_blank_name_are_422(owner_client):
    r = owner_client.post("/api/v1/keys", {"name": "k", "scopes": ["root"]}, content_type="application/json")
    assert r.status_code == 422 and "root" in r.json()["error"]["message"]
    r = owner_client.post("/api/v1/keys", {"name": "   "}, content_type="application/json")
    assert r.status_code == 422


def test_management_api_needs_authentication(client):
    r = client.get("/api/v1/keys")
    assert r.status_code == 401 and r.json()["error"]["type"] == "unauthorized"


def test_session_writes_need_a_csrf_token(owner):
    c = Client(enforce_csrf_checks=True)
    c.force_login(owner)
    r = c.post("/api/v1/keys", {"name": "k"}, content_type="application/json")
    assert r.status_code == 403
    assert not ApiKey.objects.exists()


def test_manage_key_works_as_bearer_for_the_management_api(owner_client):
    client = Client()
    clear = owner_client.post(
        "/api/v1/keys", {"name": "m", "scopes": ["manage"]}, content_type="application/json"
    ).json()["key"]
    r = client.get("/api/v1/keys", HTTP_AUTHORIZATION=f"Bearer {clear}")
    assert r.status_code == 200 and len(r.json()) == 1
    inference_only = owner_client.post("/api/v1/keys", {"name": "i"}, content_type="application/json").json()[
        "key"
    ]
    assert client.get("/api/v1/keys", HTTP_AUTHORIZATION=f"Bearer {inference_only}").status_code == 401


def test_key_pages_create_show_once_and_revoke(owner_client, team):
    r = owner_client.post("/accounts/keys/", {"name": "page key", "scopes": ["inference"]}, follow=True)
    assert r.status_code == 200 and r.redirect_chain == []  # the answer itself shows the key (review L-F)
    key = ApiKey.objects.get(team=team)
    assert b"will not be shown again" in r.content and key.prefix.encode() in r.content
    again = owner_client.get("/accounts/keys/")
    assert b"will not be shown again" not in again.content
    owner_client.post(f"/accounts/keys/{key.pk}/revoke")
    key.refresh_from_db()
    assert key.revoked_at is not None


def test_new_keys_are_cached_at_once_with_their_rate_limit_and_sync_repairs_the_cache(owner_client, team):
    from accounts.services import api_keys_sync

    r = owner_client.post(
        "/api/v1/keys", {"name": "limited", "rate_per_s": 5, "burst": 10}, content_type="application/json"
    )
    # on_commit callbacks do not fire inside the test transaction: run the sync that the worker runs every minute
    stored = ApiKey.objects.get(team=team)
    assert r.json()["rate_per_s"] == 5 and stored.burst == 10
    keycache.cache_drop(stored.prefix)
    assert api_keys_sync() >= 1
    raw = keycache.client().get(keycache.names().api_key(stored.prefix))
    cached = entry_open(raw, keyhash.signer().public_key(), settings.REDIS_PREFIX, stored.prefix)
    assert cached is not None and cached.digest == keyhash.cache_digest(stored)
    identity = cached.identity
    assert (identity.key_id, identity.team_id, identity.scopes) == (str(stored.pk), team.pk, ("inference",))
    assert (identity.rate_per_s, identity.burst, identity.expires_at, identity.deployments) == (
        5.0,
        10,
        None,
        (),
    )
    assert keycache.client().ttl(keycache.names().api_key(stored.prefix)) == -1  # lives until revoked
    owner_client.delete(f"/api/v1/keys/{stored.pk}")
    assert keycache.client().get(keycache.names().api_key(stored.prefix)) == TOMBSTONE
    api_keys_sync()
    assert keycache.client().get(keycache.names().api_key(stored.prefix)) == TOMBSTONE


@pytest.mark.parametrize(
    "fields, message",
    [
        ({"rate_per_s": 0}, "rate_per_s"),
        ({"burst": 5}, "burst needs"),
        ({"rate_per_s": 1, "burst": 0}, "burst"),
    ],
)
def test_bad_rate_limits_are_422(owner_client, fields, message):
    r = owner_client.post("/api/v1/keys", {"name": "k", **fields}, content_type="application/json")
    assert r.status_code == 422 and message in r.json()["error"]["message"]


def test_key_page_shows_usage_counted_by_the_runners(owner_client, team):
    owner_client.post("/api/v1/keys", {"name": "counted"}, content_type="application/json")
    key = ApiKey.objects.get(team=team)
    keycache.client().delete(keycache.names().usage(key.pk))
    keycache.client().hset(keycache.names().usage(key.pk), mapping={"requests": 12, "images": 12})
    try:
        page = owner_client.get("/accounts/keys/").content.decode()
    finally:
        keycache.client().delete(keycache.names().usage(key.pk))
    assert "12 requests, 12 images" in page
