"""The console's `/v1/` gateway, called in-process as ASGI: it reads API keys only under this install's
Redis prefix (settings.REDIS_PREFIX), and answers a wrong method with 405 and an `Allow` header."""

from __future__ import annotations

import json
import secrets

import pytest

from accounts import keycache, keyhash
from accounts.services import api_key_create
from contract.apikeys import TOMBSTONE, entry_sign, key_generate, key_hash, key_prefix
from contract.redis_keys import RedisKeys
from inference.gateway import auth
from inference.gateway.app import gateway_app
from tests.support.gateway import run

pytestmark = pytest.mark.django_db(transaction=True)  # the gateway reads the database from worker threads


@pytest.fixture(autouse=True)
def fresh_gateway_redis(monkeypatch):
    """The gateway keeps one asyncio Redis client per process; each test runs its own event loop."""
    monkeypatch.setattr(auth, "_redis", None)
    monkeypatch.setattr(auth, "_limiter", None)


@pytest.fixture
def installs(settings):
    """Two prefixes on the suite's Redis; yields a helper that issues a key of install A."""
    a, b = RedisKeys(f"gw-a-{secrets.token_hex(3)}"), RedisKeys(f"gw-b-{secrets.token_hex(3)}")
    written: list[str] = []

    def issue_key_of_a(team_id: int = 1, scopes=("inference",)) -> str:
        key, prefix = key_generate()  # install A's database holds it; this one (shared by both here) does not
        written.append(a.api_key(prefix))
        entry = entry_sign(keyhash.signer(), a.prefix, prefix=prefix, digest=key_hash(key), key_id=901,
                           team_id=team_id, scopes=scopes)  # fmt: skip
        keycache.client().set(written[-1], entry, ex=120)
        return key

    yield a, b, issue_key_of_a
    for names in (a, b):  # entries, and the negative ones a refused key leaves
        written.extend(keycache.client().scan_iter(match=f"{names.prefix}:*"))
    if written:
        keycache.client().delete(*written)


async def call(method: str, path: str, key: str) -> tuple[int, dict[str, str], dict]:
    """One request through the gateway ASGI app: (status, headers, JSON body)."""
    sent: list[dict] = []
    scope = {"type": "http", "method": method, "path": path, "query_string": b"",
             "headers": [(b"authorization", f"Bearer {key}".encode()), (b"content-length", b"0")]}  # fmt: skip

    async def receive() -> dict:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict) -> None:
        sent.append(message)

    await gateway_app(scope, receive, send)
    headers = {k.decode(): v.decode() for k, v in sent[0]["headers"]}
    return sent[0]["status"], headers, json.loads(sent[1]["body"])


def test_a_key_cached_by_install_a_is_accepted_by_a_and_refused_by_b(settings, installs) -> None:
    a, b, issue_key_of_a = installs
    key = issue_key_of_a()

    async def scenario() -> None:
        settings.REDIS_PREFIX = a.prefix
        assert (await call("GET", "/v1/models", key))[::2] == (200, {"object": "list", "data": []})
        settings.REDIS_PREFIX = b.prefix
        status, _, body = await call("GET", "/v1/models", key)
        assert status == 401 and body["error"]["type"] == "unauthorized"

    run(scenario)
    assert keycache.client().get(b.api_key(key_prefix(key))) in (None, TOMBSTONE)  # B did not adopt A's key


def test_the_console_writes_key_entries_under_its_own_prefix(settings, installs, owner, team) -> None:
    a, b, _ = installs
    settings.REDIS_PREFIX = a.prefix
    api_key, clear = api_key_create(team=team, actor=owner, name="ci", scopes=["inference"])
    try:
        assert keycache.client().get(a.api_key(api_key.prefix)) is not None
        assert keycache.client().get(RedisKeys().api_key(api_key.prefix)) is None

        async def scenario() -> None:
            assert (await call("GET", "/v1/models", clear))[0] == 200

        run(scenario)
    finally:
        keycache.client().delete(a.api_key(api_key.prefix))


@pytest.mark.parametrize(
    ("method", "path", "allow"),
    [("GET", "/v1/deployments/colours/predict", "POST"), ("PUT", "/v1/chat/completions", "POST"),
     ("DELETE", "/v1/embeddings", "POST"), ("POST", "/v1/models", "GET")],
)  # fmt: skip
def test_a_wrong_method_is_405_with_allow(settings, installs, method: str, path: str, allow: str) -> None:
    a, _, issue_key_of_a = installs
    settings.REDIS_PREFIX = a.prefix
    key = issue_key_of_a()

    async def scenario() -> None:
        status, headers, body = await call(method, path, key)
        assert status == 405 and headers["allow"] == allow
        assert body["error"]["type"] == "method_not_allowed" and method in body["error"]["message"]

    run(scenario)


def test_an_unknown_route_is_still_404(settings, installs) -> None:
    a, _, issue_key_of_a = installs
    settings.REDIS_PREFIX = a.prefix
    key = issue_key_of_a()

    async def scenario() -> None:
        status, _, body = await call("GET", "/v1/nowhere", key)
        assert status == 404 and body["error"]["type"] == "not_found"

    run(scenario)
