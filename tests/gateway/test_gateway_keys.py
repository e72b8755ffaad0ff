"""API keys at the console's `/v1/` gateway, called in-process as ASGI: forged entries, one 401 body for
every bad key, expiry, per-deployment scopes (403, hidden from /v1/models) and monthly quotas (429)."""

from __future__ import annotations

import asyncio
import json
import time
from datetime import UTC, datetime, timedelta

import pytest
from asgiref.sync import sync_to_async
from django.conf import settings
from django.utils import timezone

from accounts import keycache, keyhash
from accounts.models import ApiKey
from accounts.services import api_key_create, api_key_revoke
from contract.apikeys import INVALID_KEY_MESSAGE, entry_sign, key_generate, key_hash
from contract.quotas import month_of, next_month_start
from contract.signing import signing_key_from_secret
from inference.gateway import app as gateway_app_module
from inference.gateway import auth
from inference.gateway.app import gateway_app
from inference.gateway.routing import RouteTable
from inference.models import Deployment
from inference.services.registry import UploadedModel, model_version_upload
from tests.support.gateway import run
from tests.support.tiny_models import COLOURS, colour_classifier

pytestmark = pytest.mark.django_db(transaction=True)  # the gateway reads the database from worker threads


@pytest.fixture(autouse=True)
def fresh_gateway_redis(monkeypatch):
    monkeypatch.setattr(auth, "_redis", None)
    monkeypatch.setattr(auth, "_limiter", None)
    # Each test builds its own deployments: routes cached by an earlier test's team must not answer here.
    monkeypatch.setattr(gateway_app_module, "routes", RouteTable())

    def clean() -> None:  # before too: row ids restart with each test database, counters must not add up
        stale = list(keycache.client().scan_iter(match=f"{settings.REDIS_PREFIX}:*"))
        if stale:
            keycache.client().delete(*stale)

    clean()
    yield
    clean()


@pytest.fixture
def deployments(team, owner, tmp_path):
    path = colour_classifier(tmp_path / "c.onnx")
    upload = UploadedModel(name="gk", task="image-classification", model_chunks=[path.read_bytes()],
                           labels_text="\n".join(COLOURS))  # fmt: skip
    colour_version = model_version_upload(team=team, actor=owner, upload=upload)
    return [
        Deployment.objects.create(team=team, name=n, model_version=colour_version) for n in ("gk-a", "gk-b")
    ]


async def call(
    method: str, path: str, key: str | None, body: bytes = b""
) -> tuple[int, dict[str, str], bytes]:
    """One request through the gateway ASGI app: (status, headers, raw body)."""
    sent: list[dict] = []
    headers = [(b"content-length", str(len(body)).encode()), (b"content-type", b"image/jpeg")]
    if key is not None:
        headers.append((b"authorization", f"Bearer {key}".encode()))
    scope = {"type": "http", "method": method, "path": path, "query_string": b"", "headers": headers,
             "client": ("192.0.2.7", 5555)}  # fmt: skip
    chunks = [{"type": "http.request", "body": body, "more_body": False}]

    async def receive() -> dict:
        return chunks.pop(0) if chunks else {"type": "http.disconnect"}

    async def send(message: dict) -> None:
        sent.append(message)

    await gateway_app(scope, receive, send)
    return sent[0]["status"], {k.decode(): v.decode() for k, v in sent[0]["headers"]}, sent[1]["body"]


def test_forged_or_unsigned_entries_are_refused(team) -> None:
    forged, prefix = key_generate()
    attacker = signing_key_from_secret("not the console's")
    entries = [
        entry_sign(
            attacker,
            settings.REDIS_PREFIX,
            prefix=prefix,
            digest=key_hash(forged),
            key_id=1,
            team_id=team.pk,
            scopes=["inference"],
        ),  # fmt: skip
        json.dumps({"key_id": 1, "team_id": team.pk, "scopes": ["inference"]}),  # the old, unsigned format
    ]

    async def scenario() -> None:
        for entry in entries:
            await sync_to_async(keycache.client().set)(keycache.names().api_key(prefix), entry)
            status, _, body = await call("GET", "/v1/models", forged)
            assert status == 401 and json.loads(body)["error"]["message"] == INVALID_KEY_MESSAGE

    run(scenario)


def test_every_bad_key_gets_the_same_401_body(team, owner) -> None:
    row, good = api_key_create(team=team, actor=owner, name="g")
    revoked_row, revoked = api_key_create(team=team, actor=owner, name="r")
    api_key_revoke(team=team, actor=owner, key_id=revoked_row.pk)
    expired_row, expired = api_key_create(
        team=team, actor=owner, name="e", expires_at=timezone.now() + timedelta(hours=1)
    )
    ApiKey.objects.filter(pk=expired_row.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    keycache.cache_drop(expired_row.prefix)  # a miss: the database says expired
    wrong = good[:-3] + ("abc" if not good.endswith("abc") else "xyz")
    bad = {
        "malformed": "lt_x",
        "unknown": key_generate()[0],
        "wrong": wrong,
        "revoked": revoked,
        "expired": expired,
    }

    async def scenario() -> None:
        keycache.cache_put(row)  # the wrong secret meets a cached entry, the others do not
        answers = {name: await call("GET", "/v1/models", key) for name, key in bad.items()}
        assert {a[0] for a in answers.values()} == {401}
        assert len({a[2] for a in answers.values()}) == 1, answers
        assert (await call("GET", "/v1/models", good))[0] == 200

    run(scenario)


def test_a_key_whose_entry_has_expired_is_refused_without_the_database(team, owner) -> None:
    row, clear = api_key_create(
        team=team, actor=owner, name="x", expires_at=timezone.now() + timedelta(hours=1)
    )

    async def scenario() -> None:
        assert (await call("GET", "/v1/models", clear))[0] == 200
        # Time passes: the entry the console wrote says the key expired a second ago.
        entry = entry_sign(keyhash.signer(), settings.REDIS_PREFIX, prefix=row.prefix, digest=key_hash(clear),
                           key_id=row.pk, team_id=team.pk, scopes=["inference"],
                           expires_at=timezone.now().timestamp() - 1, revision=row.revision)  # fmt: skip
        await sync_to_async(keycache.client().set)(keycache.names().api_key(row.prefix), entry)
        status, _, body = await call("GET", "/v1/models", clear)
        assert status == 401 and json.loads(body)["error"]["message"] == INVALID_KEY_MESSAGE

    run(scenario)


def test_a_deployment_scoped_key_sees_and_calls_only_its_deployments(team, owner, deployments) -> None:
    _, clear = api_key_create(team=team, actor=owner, name="s", deployments=["gk-a"])
    _, everything = api_key_create(team=team, actor=owner, name="all")

    async def scenario() -> None:
        _, _, body = await call("GET", "/v1/models", clear)
        assert [m["id"] for m in json.loads(body)["data"]] == ["gk-a"]
        _, _, body = await call("GET", "/v1/models", everything)
        assert sorted(m["id"] for m in json.loads(body)["data"]) == ["gk-a", "gk-b"]
        status, _, body = await call("POST", "/v1/deployments/gk-b/predict", clear, b"x")
        assert status == 403 and json.loads(body)["error"]["type"] == "forbidden"
        status, _, body = await call("POST", "/v1/deployments/gk-a/predict", clear, b"x")
        assert status == 503 and "no ready replica" in json.loads(body)["error"]["message"]  # allowed

    run(scenario)


def test_a_spent_monthly_quota_is_429_with_the_reset_date_and_retry_after(team, owner, deployments) -> None:
    row, clear = api_key_create(team=team, actor=owner, name="q", quota_requests=2)
    now = datetime.now(UTC)
    month = keycache.names().usage_month(row.pk, month_of(now))

    async def scenario() -> None:
        await sync_to_async(keycache.client().hset)(month, "requests", 1)
        _, _, body = await call("POST", "/v1/deployments/gk-a/predict", clear, b"x")
        assert "no ready replica" in json.loads(body)["error"]["message"]  # room left: on to the replicas
        await sync_to_async(keycache.client().hset)(month, "requests", 2)
        status, headers, body = await call("POST", "/v1/deployments/gk-a/predict", clear, b"x")
        reset = next_month_start(now)
        assert status == 429 and json.loads(body) == {"error": {"type": "quota_exceeded",
            "message": f"monthly request quota of 2 spent; resets on {reset:%Y-%m-%d}"}}  # fmt: skip
        assert 1 <= int(headers["retry-after"]) <= (reset - now).total_seconds() + 1

    run(scenario)


def test_the_gateway_notes_last_use_and_address(team, owner) -> None:
    row, clear = api_key_create(team=team, actor=owner, name="l")

    async def scenario() -> None:
        assert (await call("GET", "/v1/models", clear))[0] == 200

    run(scenario)
    seen = keycache.client().hgetall(keycache.names().last_use(row.pk))
    assert seen[b"addr"] == b"192.0.2.7" and float(seen[b"at"]) > 0


def test_an_entry_is_verified_once_and_a_revocation_still_bites_at_once(team, owner, monkeypatch) -> None:
    row, clear = api_key_create(team=team, actor=owner, name="v")
    opened: list[str] = []
    real_open = auth.entry_open

    def counting_open(raw, verifier, namespace, prefix):  # the real check, counted
        opened.append(prefix)
        return real_open(raw, verifier, namespace, prefix)

    monkeypatch.setattr(auth, "entry_open", counting_open)

    async def scenario() -> None:
        for _ in range(5):
            assert (await call("GET", "/v1/models", clear))[0] == 200
        assert opened == [row.prefix]  # Redis read five times, the signature checked once
        await sync_to_async(api_key_revoke)(team=team, actor=owner, key_id=row.pk)
        status, _, body = await call("GET", "/v1/models", clear)  # the very next request
        assert status == 401 and json.loads(body)["error"]["message"] == INVALID_KEY_MESSAGE
        # New bytes under the same prefix (a forged entry) are checked afresh, never taken on trust.
        forged = entry_sign(signing_key_from_secret("not the console's"), settings.REDIS_PREFIX,
                            prefix=row.prefix, digest=key_hash(clear), key_id=row.pk, team_id=team.pk,
                            scopes=["inference"])  # fmt: skip
        await sync_to_async(keycache.client().set)(keycache.names().api_key(row.prefix), forged)
        assert (await call("GET", "/v1/models", clear))[0] == 401
        assert opened[-1] == row.prefix and len(opened) == 2

    run(scenario)


def test_last_use_is_noted_at_most_once_a_second_per_key(team, owner) -> None:
    row, clear = api_key_create(team=team, actor=owner, name="once")
    noted = keycache.names().last_use(row.pk)

    async def scenario() -> None:
        assert (await call("GET", "/v1/models", clear))[0] == 200
        first = await sync_to_async(keycache.client().hgetall)(noted)
        assert first[b"addr"] == b"192.0.2.7"
        await sync_to_async(keycache.client().delete)(noted)
        assert (await call("GET", "/v1/models", clear))[0] == 200  # within the second: not written again
        assert await sync_to_async(keycache.client().exists)(noted) == 0
        auth._last_use.forget(row.prefix)  # as a second later
        assert (await call("GET", "/v1/models", clear))[0] == 200
        assert await sync_to_async(keycache.client().exists)(noted) == 1

    run(scenario)


def test_an_expired_route_is_read_once_however_many_requests_wait_for_it(deployments, monkeypatch) -> None:
    from inference.gateway import routing

    reads: list[str] = []
    real_load = routing._load

    def counting_load(name):
        reads.append(name)
        return real_load(name)

    monkeypatch.setattr(routing, "_load", counting_load)
    table = RouteTable()

    async def scenario() -> None:
        first = await asyncio.gather(*(table.get("gk-a") for _ in range(20)))
        assert reads == ["gk-a"] and {r.name for r in first} == {"gk-a"}
        assert await table.get("gk-a") is first[0] and reads == ["gk-a"]  # kept for TTL_S
        table._routes["gk-a"] = (time.monotonic() - routing.TTL_S - 1, first[0])  # expired
        again = await asyncio.gather(*(table.get("gk-a") for _ in range(20)), table.get("gk-b"))
        assert reads == ["gk-a", "gk-a", "gk-b"] and again[-1].name == "gk-b"
        assert await asyncio.gather(*(table.get("no-such") for _ in range(5))) == [None] * 5
        assert reads.count("no-such") == 1 and len(table) == 2  # a miss is not kept

    run(scenario)
