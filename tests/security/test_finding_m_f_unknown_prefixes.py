"""Review finding M-F: at the console's `/v1/`, every well-formed key with a random prefix cost two
PostgreSQL queries and a Redis write on the database thread that route refreshes share. The gateway now
checks a miss's prefix against the set of usable keys' prefixes (4 bytes a key), read once and again
only when a key is created or revoked: a flood of random prefixes costs no query after the first, keys
created after it work at once, and the flood grows nothing in memory or in Redis."""

from __future__ import annotations

import pytest

from accounts import keycache
from accounts.services import api_key_create, api_key_revoke
from contract.apikeys import INVALID_KEY_MESSAGE, key_generate
from inference.gateway import auth
from tests.security.dataplane import call
from tests.security.key_readers import DbThreadQueries, entry_name, fresh_gateway, use_own_prefix
from tests.support.gateway import run

pytestmark = pytest.mark.django_db(transaction=True)  # the gateway reads the database from its own thread
FLOOD = 40


@pytest.fixture(autouse=True)
def isolated(settings, monkeypatch):
    clean = use_own_prefix(settings)
    fresh_gateway(monkeypatch)
    yield
    clean()


def test_m_f_random_prefixes_cost_no_database_query_after_the_first(team, owner) -> None:
    _, good = api_key_create(team=team, actor=owner, name="real")
    flood = [key_generate()[0] for _ in range(FLOOD)]

    async def scenario() -> None:
        assert (await call("GET", "/v1/models", key=good)).status == 200
        async with DbThreadQueries() as first:
            answer = await call("GET", "/v1/models", key=flood[0])
        assert answer.status == 401 and answer.json()["error"]["message"] == INVALID_KEY_MESSAGE
        assert len(first.queries) <= 1, first.queries
        async with DbThreadQueries() as rest:
            for key in [*flood[1:], *flood]:  # new prefixes, then the same ones again
                answer = await call("GET", "/v1/models", key=key)
                assert answer.status == 401 and answer.json()["error"]["message"] == INVALID_KEY_MESSAGE
        assert rest.queries == []
        assert (await call("GET", "/v1/models", key=good)).status == 200

    run(scenario)
    # No Redis write per random prefix either (it used to leave a negative entry for each).
    assert not any(keycache.client().exists(entry_name(key[:11])) for key in flood)


def test_m_f_a_key_created_after_a_flood_works_at_once_even_with_its_entry_lost(team, owner) -> None:
    flood = [key_generate()[0] for _ in range(FLOOD)]

    async def scenario() -> None:
        async with DbThreadQueries() as queries:
            for key in flood:
                assert (await call("GET", "/v1/models", key=key)).status == 401
        assert len(queries.queries) <= 1, queries.queries  # the set of known prefixes, read once
        row, fresh = await sync(api_key_create)(team=team, actor=owner, name="new")
        assert (await call("GET", "/v1/models", key=fresh)).status == 200  # its entry was written at creation
        second, other = await sync(api_key_create)(team=team, actor=owner, name="newer")
        await sync(keycache.cache_drop)(second.prefix)  # Redis lost the entry: the set knows it, the DB fills
        async with DbThreadQueries() as queries:
            assert (await call("GET", "/v1/models", key=other)).status == 200
        assert 1 <= len(queries.queries) <= 3, queries.queries
        assert (await sync(keycache.cache_get)(second.prefix)) not in (None, b"-")
        # Revocation is a change the set follows too: a revoked key's lost entry costs no query either.
        await sync(api_key_revoke)(team=team, actor=owner, key_id=row.pk)
        await sync(keycache.cache_drop)(row.prefix)
        assert (await call("GET", "/v1/models", key=fresh)).status == 401
        async with DbThreadQueries() as queries:
            assert (await call("GET", "/v1/models", key=fresh)).status == 401
        assert queries.queries == []

    run(scenario)


def test_m_f_a_flood_grows_no_memory_in_the_gateway(team, owner) -> None:
    api_key_create(team=team, actor=owner, name="real")

    async def scenario() -> None:
        await call("GET", "/v1/models", key=key_generate()[0])
        sizes = (len(auth._opened), len(auth._floors), len(auth._known._numbers or ()))
        for _ in range(FLOOD * 5):
            assert (await call("GET", "/v1/models", key=key_generate()[0])).status == 401
        assert (len(auth._opened), len(auth._floors), len(auth._known._numbers or ())) == sizes
        assert auth._known._numbers is not None and auth._known._numbers.itemsize == 4

    run(scenario)


def sync(function):
    from asgiref.sync import sync_to_async

    return sync_to_async(function)
