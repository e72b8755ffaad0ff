"""The playground's short-lived keys: minted only for a signed-in member, for their own team, inference
only, expiring in minutes, hidden from the key lists and unchangeable; refused by the management API and,
once expired or for another team's deployment, by the `/v1/` gateway."""

from __future__ import annotations

import re
import time

import pytest
from django.conf import settings
from django.test import Client
from django.utils import timezone

from accounts import keycache, services
from accounts.models import ApiKey, ApiKeyKind, AuditEvent
from inference.gateway import app as gateway_app_module
from inference.gateway import auth
from inference.gateway.app import gateway_app
from inference.gateway.routing import RouteTable
from inference.models import Deployment
from inference.services.registry import UploadedModel, model_version_upload
from tests.support.gateway import run
from tests.support.tiny_models import COLOURS, colour_classifier

pytestmark = pytest.mark.django_db(transaction=True)  # the gateway reads the database from worker threads
KEY = re.compile(r"lt_[0-9a-f]{8}_[A-Za-z0-9_-]{43}")
MINT = "/playground/key"


@pytest.fixture(autouse=True)
def fresh_gateway(monkeypatch):
    monkeypatch.setattr(auth, "_redis", None)
    monkeypatch.setattr(auth, "_limiter", None)
    monkeypatch.setattr(gateway_app_module, "routes", RouteTable())

    def clean() -> None:
        stale = list(keycache.client().scan_iter(match=f"{settings.REDIS_PREFIX}:*"))
        if stale:
            keycache.client().delete(*stale)

    clean()
    yield
    clean()


def signed_in(user) -> Client:
    client = Client(enforce_csrf_checks=True)
    client.force_login(user)
    page = client.get("/playground/")
    assert page.status_code == 200
    found = re.search(r'id="pg-csrf" value="([^"]+)"', page.content.decode())
    assert found, "the playground page carries the CSRF token its script sends"
    client.csrf = found.group(1)  # type: ignore[attr-defined]
    return client


def mint(client: Client, **headers):
    return client.post(MINT, HTTP_X_CSRFTOKEN=client.csrf, **headers)  # type: ignore[attr-defined]


async def v1(method: str, path: str, key: str) -> int:
    """One request through the gateway's ASGI app; its status."""
    sent: list[dict] = []
    scope = {"type": "http", "method": method, "path": path, "query_string": b"", "client": ("192.0.2.9", 1),
             "headers": [(b"authorization", f"Bearer {key}".encode()), (b"content-type", b"image/jpeg"),
                         (b"content-length", b"0")]}  # fmt: skip

    async def receive() -> dict:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict) -> None:
        sent.append(message)

    await gateway_app(scope, receive, send)
    return sent[0]["status"]


def statuses(*calls: tuple[str, str, str]) -> list[int]:
    out: list[int] = []

    async def scenario() -> None:
        for method, path, key in calls:
            out.append(await v1(method, path, key))

    run(scenario)
    return out


def test_a_member_gets_an_inference_only_key_that_expires_in_minutes_and_is_stored_hashed(owner, team):
    r = mint(signed_in(owner))
    assert r.status_code == 200 and r["Cache-Control"] == "no-store"
    body = r.json()
    assert KEY.fullmatch(body["key"]) and body["team"] == "acme"
    row = ApiKey.objects.get(prefix=body["prefix"])
    assert row.kind == ApiKeyKind.PLAYGROUND and row.scopes == ["inference"] and row.team == team
    ttl = (row.expires_at - timezone.now()).total_seconds()
    assert settings.PLAYGROUND_KEY_TTL_S - 60 < ttl <= settings.PLAYGROUND_KEY_TTL_S
    stored = " ".join(str(getattr(row, f.attname)) for f in ApiKey._meta.fields)
    assert body["key"] not in stored and body["key"].split("_")[2] not in stored
    assert body["key"] not in str(list(AuditEvent.objects.values()))


def test_signed_out_callers_and_get_requests_get_no_key(db):
    anonymous = Client()
    r = anonymous.post(MINT)
    assert r.status_code == 401 and r.json()["error"]["type"] == "unauthorized"
    assert anonymous.get(MINT).status_code == 405
    assert not ApiKey.objects.exists()


def test_the_mint_needs_the_pages_csrf_token(owner):
    client = Client(enforce_csrf_checks=True)
    client.force_login(owner)
    assert client.post(MINT).status_code == 403
    assert not ApiKey.objects.exists()


def test_an_outsider_cannot_mint_for_another_team_and_a_viewer_cannot_mint_at_all(
    owner, team, viewer, outsider
):
    r = mint(signed_in(outsider), HTTP_X_LANTAU_TEAM=str(team.pk))
    assert r.status_code == 404 and r.json()["error"]["type"] == "not_found"
    r = mint(signed_in(viewer))
    assert r.status_code == 403 and "key.create" in r.json()["error"]["message"]
    assert not ApiKey.objects.filter(team=team).exists()
    r = mint(signed_in(outsider))  # for their own team it works
    assert r.status_code == 200 and r.json()["team"] == "globex"


def test_playground_keys_are_not_listed_not_changeable_and_not_for_the_management_api(owner, team):
    client = signed_in(owner)
    body = mint(client).json()
    row = ApiKey.objects.get(prefix=body["prefix"])
    services.api_key_create(team=team, actor=owner, name="a normal key")
    listed = client.get("/api/v1/keys").json()
    assert [k["name"] for k in listed] == ["a normal key"]
    assert body["prefix"] not in client.get("/accounts/keys/").content.decode()
    patch = client.patch(
        f"/api/v1/keys/{row.pk}", {"expires_at": None}, content_type="application/json",
        HTTP_X_CSRFTOKEN=client.csrf,  # type: ignore[attr-defined]
    )  # fmt: skip
    assert patch.status_code == 404
    assert client.get(f"/api/v1/keys/{row.pk}/usage").status_code == 404
    row.refresh_from_db()
    assert row.expires_at is not None
    management = Client().get("/api/v1/models", HTTP_AUTHORIZATION=f"Bearer {body['key']}")
    assert management.status_code == 401


def test_one_person_holds_a_bounded_number_of_live_playground_keys(owner, team):
    client = signed_in(owner)
    prefixes = [mint(client).json()["prefix"] for _ in range(settings.PLAYGROUND_KEYS_PER_PERSON + 1)]
    live = ApiKey.objects.filter(team=team, kind=ApiKeyKind.PLAYGROUND, revoked_at__isnull=True)
    assert live.count() == settings.PLAYGROUND_KEYS_PER_PERSON
    assert not live.filter(prefix=prefixes[0]).exists()  # the oldest one was revoked
    assert keycache.cache_get(prefixes[0]) == b"-"


def test_the_gateway_takes_the_key_for_its_own_team_only(owner, team, outsider, tmp_path):
    path = colour_classifier(tmp_path / "c.onnx")
    upload = UploadedModel(name="pgk", task="image-classification", model_chunks=[path.read_bytes()],
                           labels_text="\n".join(COLOURS))  # fmt: skip
    version = model_version_upload(team=team, actor=owner, upload=upload)
    Deployment.objects.create(team=team, name="pg-acme", model_version=version)
    mine = mint(signed_in(owner)).json()["key"]
    theirs = mint(signed_in(outsider)).json()["key"]
    ok, foreign = statuses(("GET", "/v1/models", mine), ("POST", "/v1/deployments/pg-acme/predict", theirs))
    assert ok == 200
    assert foreign in (403, 404)  # another team's deployment does not exist for globex's key


def test_an_expired_playground_key_is_refused_by_the_gateway_and_the_database(owner, settings):
    settings.PLAYGROUND_KEY_TTL_S = 1  # the environment allows 60 s at least; the rule is the same
    key = mint(signed_in(owner)).json()["key"]
    assert statuses(("GET", "/v1/models", key)) == [200]
    time.sleep(1.2)
    assert statuses(("GET", "/v1/models", key)) == [401]  # the signed cache entry carries the expiry
    keycache.cache_drop(key.split("_")[1])
    assert statuses(("GET", "/v1/models", key)) == [401]  # and the database agrees on a cache miss
    assert services.api_key_check(clear_key=key) is None
