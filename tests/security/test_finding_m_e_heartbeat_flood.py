"""Review M-E: unauthenticated POSTs to the heartbeat shared its 8-thread pool through an unbounded
queue, each body read before the credential was checked, so a flood delayed real heartbeats past the
offline cut-off and every node, and every route, went away.

Now (``inference.api.heartbeat``) a malformed credential is refused before its body is read, a
credential that did not authenticate recently spends a global budget of database checks a second
(``LANTAU_HEARTBEAT_UNKNOWN_PER_S``; 503 with Retry-After beyond it, no thread, no query), and a real
node's credential, once it authenticated, is admitted whatever the flood.
"""

from __future__ import annotations

import asyncio
import json
import secrets

import pytest
from django.db import connections

from inference import liveness
from inference.api import heartbeat
from inference.services.nodes import node_remove, node_token_create
from tests.fleet.test_heartbeat_route import CountingPool, beat_body, call

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("install_admin")]


@pytest.fixture(autouse=True)
def pool(monkeypatch):
    pool = CountingPool(max_workers=1)
    monkeypatch.setattr(heartbeat, "_pool", pool)
    monkeypatch.setattr(heartbeat, "known", heartbeat.KnownCredentials())
    liveness.forget("hk-1")
    yield pool
    pool.submit(connections.close_all).result()
    pool.shutdown()
    liveness.forget("hk-1")


def made_up() -> str:
    return "ltn_" + secrets.token_urlsafe(32)


def body_read(token: str, size: int = 512 * 1024) -> tuple[int, bool]:
    """(status, whether the app asked for the body) for one heartbeat of ``size`` bytes."""
    asked = []
    payload = json.dumps({**beat_body(), "pad": "x" * size}).encode()
    scope = {"type": "http", "method": "POST", "path": heartbeat.PATH, "query_string": b"",
             "headers": [(b"authorization", f"Bearer {token}".encode())], "client": ("203.0.113.5", 4000)}  # fmt: skip
    sent = []

    async def receive():
        asked.append(1)
        return {"type": "http.request", "body": payload, "more_body": False}

    async def send(message):
        sent.append(message)

    asyncio.run(heartbeat.app(scope, receive, send))
    return sent[0]["status"], bool(asked)


def test_m_e_a_malformed_credential_is_refused_before_its_body_is_read(pool) -> None:
    for token in ("", "nope", "ltn_short", "ltn_" + "!" * 43, "Bearer " + "a" * 43):
        status, read = body_read(token)
        assert (status, read) == (401, False), token
    assert pool.submitted == 0


def test_m_e_made_up_credentials_spend_the_budget_and_no_more(pool, settings) -> None:
    settings.HEARTBEAT_UNKNOWN_PER_S = 5  # a burst of 20, then 5 a second
    answers = [body_read(made_up(), size=1024) for _ in range(120)]
    admitted = [a for a in answers if a[0] == 401]  # checked against the database: no such node
    refused = [a for a in answers if a[0] == 503]
    assert len(admitted) + len(refused) == 120
    assert 20 <= len(admitted) <= 40, len(admitted)  # the burst and what refilled while the test ran
    assert all(not read for _, read in refused)  # no body read, no thread, no query
    assert pool.submitted == len(admitted)


def test_m_e_a_real_node_keeps_beating_through_the_flood_and_a_removed_one_stops(
    pool, settings, owner
) -> None:
    settings.HEARTBEAT_UNKNOWN_PER_S = 2
    node, token = node_token_create(actor=owner, name="hk-1", region="hk")
    assert call(beat_body(), token)[0] == 200  # its first beat spends the budget once
    flood = [body_read(made_up(), size=64)[0] for _ in range(60)]
    assert flood.count(503) >= 50
    status, headers, _ = call(beat_body(), made_up())
    assert status == 503 and headers[b"retry-after"] == b"1"
    for _ in range(3):
        assert call(beat_body(), token)[0] == 200  # known: admitted whatever the budget
    node_remove(actor=owner, node=node)
    assert call(beat_body(), token)[0] == 401  # refused by the database, and forgotten
    assert token and heartbeat.token_hash(token) not in heartbeat.known.digests
