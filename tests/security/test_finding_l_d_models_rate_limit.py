"""Review finding L-D: `GET /v1/models` was answered before the key's rate limit was applied, at the
edges and at the console's `/v1/` (where each listing is a database query). Every authenticated route
now spends the key's token bucket, the one shared with `/v1/embeddings`, predictions and the runners."""

from __future__ import annotations

import pytest

from accounts.services import api_key_create
from tests.security.dataplane import call
from tests.security.key_readers import edge, edge_get, fresh_gateway, use_own_prefix
from tests.support.gateway import run

pytestmark = pytest.mark.django_db(transaction=True)  # the gateway reads the database from its own thread


@pytest.fixture(autouse=True)
def isolated(settings, monkeypatch):
    clean = use_own_prefix(settings)
    fresh_gateway(monkeypatch)
    yield
    clean()


def test_l_d_models_listing_spends_the_keys_rate_limit_at_the_console(team, owner) -> None:
    _, key = api_key_create(team=team, actor=owner, name="slow", rate_per_s=0.01, burst=1)
    _, other = api_key_create(team=team, actor=owner, name="free")

    async def scenario() -> None:
        first = await call("GET", "/v1/models", key=key)
        assert first.status == 200 and first.json()["object"] == "list"
        second = await call("GET", "/v1/models", key=key)
        assert second.status == 429 and second.json()["error"]["type"] == "rate_limited"
        assert int(second.headers["retry-after"]) >= 1
        # The same bucket as every other route: the listing spent it for predictions too.
        predict = await call("POST", "/v1/deployments/anything/predict", key=key, body=b"x")
        assert predict.status == 429
        for _ in range(5):  # a key without a limit is not slowed down
            assert (await call("GET", "/v1/models", key=other)).status == 200

    run(scenario)


def test_l_d_models_listing_spends_the_keys_rate_limit_at_the_edge(team, owner, tmp_path) -> None:
    _, key = api_key_create(team=team, actor=owner, name="slow", rate_per_s=0.01, burst=1)
    process = edge(tmp_path)
    try:
        first = edge_get(process, "/v1/models", key)
        assert first.status_code == 200 and first.json()["object"] == "list"
        second = edge_get(process, "/v1/models", key)
        assert second.status_code == 429 and second.json()["error"]["type"] == "rate_limited"
        assert int(second.headers["retry-after"]) >= 1
    finally:
        process.stop(10)
