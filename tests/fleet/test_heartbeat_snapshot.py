"""A steady heartbeat reads one row version and reuses its node's rows and answer
(``services.nodes.heartbeat_snapshot``); any change to what the answer depends on is answered at the
next heartbeat, whoever made it and however (a queryset update sends no signal)."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test import Client

from inference import liveness
from inference.models import Deployment, Node, Replica
from inference.services.deployments import DeploymentSpec, deployment_create, deployment_reconcile
from inference.services.nodes import node_rotate_request, node_token_create

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _forget():
    liveness.forget("hk-1")
    yield
    liveness.forget("hk-1")


def beat(token: str, replicas: list | None = None) -> dict:
    answer = Client().post(
        "/api/v1/nodes/heartbeat",
        {"region": "hk", "inventory": {"cpus": 2}, "replicas": replicas or []},
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {token}",
    )
    assert answer.status_code == 200, answer.content
    return answer.json()


def statements(token: str) -> list[str]:
    seen: list[str] = []

    def record(execute, sql, params, many, context):
        seen.append(sql)
        return execute(sql, params, many, context)

    with connection.execute_wrapper(record):
        beat(token)
    return [sql for sql in seen if not sql.startswith(("SAVEPOINT", "RELEASE SAVEPOINT"))]


@pytest.fixture
def placed(owner, team, colour_version):
    token = node_token_create(name="hk-1", region="hk")[1]
    beat(token)  # online
    deployment = deployment_create(
        team=team, actor=owner, spec=DeploymentSpec(name="colours", model_version_id=colour_version.pk)
    )
    deployment_reconcile(deployment.pk)
    replica = Replica.objects.get(deployment=deployment)
    beat(token, [{"id": replica.pk, "state": "ready", "url": "http://127.0.0.1:9999"}])
    return token, deployment, replica


def test_a_steady_heartbeat_is_one_read(placed):
    token, _, replica = placed
    first = beat(token)
    assert len(statements(token)) == 1  # the version read: no rows, no writes
    assert beat(token) == first and first["replicas"][0]["id"] == replica.pk


def test_changes_made_behind_its_back_are_answered_at_the_next_heartbeat(placed, owner, install_admin):
    token, deployment, replica = placed
    beat(token)
    Deployment.objects.filter(pk=deployment.pk).update(max_batch_size=3)  # no signal, no save()
    assert beat(token)["replicas"][0]["batching"]["max_batch_size"] == 3
    node_rotate_request(actor=owner, node=Node.objects.get(name="hk-1"))
    assert beat(token)["rotate_credential"] is True
    Replica.objects.filter(pk=replica.pk).delete()
    assert beat(token)["replicas"] == []
    Node.objects.filter(name="hk-1").update(status="offline")  # as the sweep marks it
    beat(token)
    assert Node.objects.get(name="hk-1").status == "online"  # it came back: written again


def test_nodes_coming_back_together_share_one_reconcile(monkeypatch, django_capture_on_commit_callbacks):
    from django.conf import settings

    from inference import queue

    liveness._redis().delete(f"{settings.REDIS_PREFIX}:nodes:once:reconcile-all")
    sent: list[tuple[str, float | None]] = []
    monkeypatch.setattr(
        queue.current_app, "send_task", lambda name, args=(), countdown=None: sent.append((name, countdown))
    )
    tokens = [node_token_create(name=name, region="hk")[1] for name in ("hk-1", "hk-2", "hk-3")]
    with django_capture_on_commit_callbacks(execute=True):
        for token in tokens:  # each was offline: each comes back
            beat(token)
    assert Node.objects.filter(status="online").count() == 3
    assert sent == [(queue.DEPLOYMENTS_RECONCILE_ALL, 1.0)]  # one pass, a second later, for all three
    liveness.forget("hk-2")
    liveness.forget("hk-3")
