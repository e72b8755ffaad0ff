"""Joining: single-use expiring join tokens exchanged for a node credential, managed by owners/admins."""

import threading
from datetime import timedelta

import pytest
from django.db import connection
from django.test import Client

from accounts.install_admin import NOT_ADMIN
from inference.credentials import token_hash
from inference.models import JoinToken, Node
from inference.services.node_join import join_token_create

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("install_admin")]  # Olivia runs the fleet


def post(client, path, body):
    return client.post(path, body, content_type="application/json")


def join(token, name="hk-new", region="hk", labels=None):
    body = {"join_token": token, "name": name, "region": region, "labels": labels or {}}
    return post(Client(), "/api/v1/nodes/join", body)


def new_token(owner_client, **body):
    r = post(owner_client, "/api/v1/nodes/join-tokens", {"region": "hk", **body})
    assert r.status_code == 201, r.content
    return r.json()


def test_an_owner_makes_a_join_token_shown_once_and_stored_hashed(owner_client):
    made = new_token(owner_client, labels={"gpu": "a10"}, ttl_s=600, name_hint="hk-gpu-1")
    assert made["join_token"].startswith("ltj_") and made["labels"] == {"gpu": "a10"}
    row = JoinToken.objects.get(pk=made["id"])
    assert row.token_hash == token_hash(made["join_token"])
    assert made["join_token"] not in str(JoinToken.objects.filter(pk=row.pk).values().get())


def test_members_and_viewers_may_not_make_join_tokens_or_manage_nodes(member_client, viewer, node_hk_cpu):
    r = post(member_client, "/api/v1/nodes/join-tokens", {"region": "hk"})
    assert r.status_code == 403 and r.json()["error"]["message"] == NOT_ADMIN
    for action in ("cordon", "uncordon", "drain", "rotate"):
        assert member_client.post(f"/api/v1/nodes/hk-cpu-1/{action}").status_code == 403
    assert member_client.delete("/api/v1/nodes/hk-cpu-1").status_code == 403
    assert Node.objects.get(name="hk-cpu-1").mode == "active"
    c = Client()
    c.force_login(viewer)
    assert post(c, "/api/v1/nodes/join-tokens", {"region": "hk"}).status_code == 403


@pytest.mark.parametrize(
    "body, message",
    [
        ({"region": "eu"}, "region must be one of hk, us"),
        ({"labels": {"GPU": "a10"}}, "labels: 'GPU' is not a label name"),
        ({"labels": {"gpu": 10}}, "labels: the value of 'gpu' must be a string"),
        ({"ttl_s": 5}, "ttl_s must be between 60 and 604800 seconds"),
        ({"name_hint": "Bad Name"}, "name_hint must be lowercase"),
    ],
)
def test_bad_join_token_requests_are_422_with_the_field_named(owner_client, body, message):
    r = post(owner_client, "/api/v1/nodes/join-tokens", {"region": "hk", **body})
    assert r.status_code == 422 and r.json()["error"]["message"].startswith(message), r.content


def test_a_node_joins_once_and_its_credential_heartbeats(owner_client):
    token = new_token(owner_client, labels={"gpu": "a10"})["join_token"]
    r = join(token, labels={"tier": "edge"})
    assert r.status_code == 201, r.content
    credential = r.json()["node_token"]
    node = Node.objects.get(name="hk-new")
    assert node.labels == {"gpu": "a10", "tier": "edge"} and node.token_hash == token_hash(credential)
    beat = Client().post("/api/v1/nodes/heartbeat", {"region": "hk"}, content_type="application/json",
                         HTTP_AUTHORIZATION=f"Bearer {credential}")  # fmt: skip
    assert beat.status_code == 200 and beat.json()["node"] == "hk-new"
    again = join(token, name="hk-other")
    assert again.status_code == 409 and "already used" in again.json()["error"]["message"]
    assert not Node.objects.filter(name="hk-other").exists()


def test_expired_unknown_and_misdirected_join_tokens_are_refused(owner, team):
    _, expired = join_token_create(actor=owner, team=team, region="hk", labels={})
    JoinToken.objects.update(expires_at=JoinToken.objects.get().created_at - timedelta(seconds=1))
    r = join(expired)
    assert r.status_code == 401 and "this join token expired at" in r.json()["error"]["message"]
    r = join("ltj_nothing-like-it")
    assert r.status_code == 401 and r.json()["error"]["message"] == "invalid join token"
    _, us_only = join_token_create(actor=owner, team=team, region="us", labels={})
    r = join(us_only, region="hk")
    assert r.status_code == 409 and "for region 'us'" in r.json()["error"]["message"]
    assert join(us_only, name="Bad Name", region="us").status_code == 422
    assert join(us_only, region="us", labels={"gpu": ["a10"]}).status_code == 422
    assert join(us_only, region="us", labels="gpu=a10").status_code == 422
    assert not Node.objects.exists()
    assert join(us_only, name="us-new", region="us").status_code == 201  # refusals did not use it up


def test_a_ready_nodes_name_is_refused_and_an_offline_one_rejoins_in_place(owner, team, node_hk_cpu):
    _, first = join_token_create(actor=owner, team=team, region="hk", labels={})
    r = join(first, name="hk-cpu-1")
    assert (
        r.status_code == 409 and "a ready node is already called 'hk-cpu-1'" in r.json()["error"]["message"]
    )
    Node.objects.filter(pk=node_hk_cpu.pk).update(status="offline")
    assert join(first, name="hk-cpu-1").status_code == 201
    assert Node.objects.filter(name="hk-cpu-1").get().pk == node_hk_cpu.pk  # reconciled, not duplicated


@pytest.mark.django_db(transaction=True)
def test_concurrent_joins_with_one_token_let_exactly_one_in(owner, team):
    _, token = join_token_create(actor=owner, team=team, region="hk", labels={})
    statuses: list[int] = []
    start = threading.Barrier(6)

    def attempt(i):
        try:
            start.wait()
            statuses.append(join(token, name=f"hk-race-{i}").status_code)
        finally:
            connection.close()

    threads = [threading.Thread(target=attempt, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(statuses) == [201, 409, 409, 409, 409, 409]
    assert Node.objects.filter(name__startswith="hk-race-").count() == 1
