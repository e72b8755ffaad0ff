"""Which nodes may run their region's edge, and how the edge's secrets reach them (in-process).

Only a join token an owner or admin made with ``edge`` (the reserved label ``lantau.io/edge=true``)
makes an edge node; a joining node cannot claim the label itself. ``GET /api/v1/nodes/edge-config``
answers an edge node's credential alone with the edge's environment; anything else is refused.
"""

from __future__ import annotations

import pytest
from django.test import Client

from accounts.models import AuditEvent
from contract.routes import EDGE_KEY_ENV
from inference.models import Node
from inference.routes_publish import edge_environment
from inference.services.node_join import EDGE_LABEL, join_token_create
from inference.services.nodes import node_token_create
from tests.support import people

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("install_admin")]  # Olivia runs the fleet
CONFIG = "/api/v1/nodes/edge-config"


def join(token: str, name: str = "hk-edge", labels: dict | None = None):
    body = {"join_token": token, "name": name, "region": "hk", "labels": labels or {}}
    return Client().post("/api/v1/nodes/join", body, content_type="application/json")


def edge_config(credential: str):
    return Client().get(CONFIG, HTTP_AUTHORIZATION=f"Bearer {credential}")


def test_a_node_joined_with_an_edge_token_gets_the_edge_environment_and_nothing_is_cached(
    owner_client, owner
):
    made = owner_client.post("/api/v1/nodes/join-tokens", {"region": "hk", "labels": {EDGE_LABEL: "true"}},
                             content_type="application/json")  # fmt: skip
    assert made.status_code == 201 and made.json()["labels"] == {EDGE_LABEL: "true"}, made.content
    joined = join(made.json()["join_token"], labels={"gpu": "none"})
    assert joined.status_code == 201, joined.content
    assert Node.objects.get(name="hk-edge").labels == {"gpu": "none", EDGE_LABEL: "true"}

    answer = edge_config(joined.json()["node_token"])
    assert answer.status_code == 200, answer.content
    assert answer["Cache-Control"] == "no-store"
    body = answer.json()
    assert (body["node"], body["region"]) == ("hk-edge", "hk")
    assert body["environment"] == edge_environment()
    assert body["environment"][EDGE_KEY_ENV]
    event = AuditEvent.objects.get(action="node.edge_config")
    assert event.target == "hk-edge" and body["environment"][EDGE_KEY_ENV] not in str(event.data)


def test_the_service_flag_makes_the_same_edge_token(owner, team):
    _, token = join_token_create(actor=owner, team=team, region="hk", labels={}, edge=True)
    credential = join(token).json()["node_token"]
    assert edge_config(credential).status_code == 200


def test_a_node_without_the_edge_label_gets_403_with_the_error_envelope(owner, team):
    _, token = join_token_create(actor=owner, team=team, region="hk", labels={"tier": "edge"})
    credential = join(token).json()["node_token"]
    answer = edge_config(credential)
    assert answer.status_code == 403
    assert answer.json()["error"]["type"] == "forbidden"
    assert "may not run an edge" in answer.json()["error"]["message"]
    assert EDGE_KEY_ENV.encode() not in answer.content
    _, made = node_token_create(name="hk-made", region="hk")  # manage.py create_node_token: never an edge
    assert edge_config(made).status_code == 403
    assert not AuditEvent.objects.filter(action="node.edge_config").exists()


def test_people_and_strangers_are_not_nodes(owner_client):
    assert Client().get(CONFIG).status_code == 401
    assert edge_config("ltn_unknown").status_code == 401
    answer = owner_client.get(CONFIG)  # a signed-in owner is still no node
    assert answer.status_code == 401 and EDGE_KEY_ENV.encode() not in answer.content


def test_a_joining_node_cannot_claim_the_edge_label_itself(owner, team):
    _, token = join_token_create(actor=owner, team=team, region="hk", labels={})
    refused = join(token, labels={EDGE_LABEL: "true"})
    assert refused.status_code == 422 and "is reserved" in refused.json()["error"]["message"]
    assert not Node.objects.exists()
    assert join(token).status_code == 201  # the refusal did not use the token up
    assert EDGE_LABEL not in Node.objects.get(name="hk-edge").labels


def test_only_install_administrators_make_edge_tokens_and_only_known_reserved_labels(
    owner_client, owner, team
):
    body = {"region": "hk", "labels": {EDGE_LABEL: "true"}}
    assert (
        owner_client.post("/api/v1/nodes/join-tokens", body, content_type="application/json").status_code
        == 201
    )
    for role, status in (("owner", 403), ("admin", 403), ("member", 403), ("viewer", 403)):  # team roles
        client = Client()
        client.force_login(people.person(f"edge-{role}", team.name, role))
        made = client.post("/api/v1/nodes/join-tokens", body, content_type="application/json")
        assert made.status_code == status, (role, made.content)
    for labels in ({EDGE_LABEL: "yes"}, {"lantau.io/other": "true"}):
        made = owner_client.post("/api/v1/nodes/join-tokens", {"region": "hk", "labels": labels},
                                 content_type="application/json")  # fmt: skip
        assert made.status_code == 422 and "is not a reserved label" in made.json()["error"]["message"]


def test_rejoining_with_a_plain_token_ends_the_edge_role(owner, team):
    _, edge_token = join_token_create(actor=owner, team=team, region="hk", labels={}, edge=True)
    assert join(edge_token).status_code == 201
    Node.objects.filter(name="hk-edge").update(status="offline")  # the machine comes back, re-joined
    _, plain = join_token_create(actor=owner, team=team, region="hk", labels={})
    credential = join(plain).json()["node_token"]
    assert edge_config(credential).status_code == 403
