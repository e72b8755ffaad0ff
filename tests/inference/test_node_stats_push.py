"""A heartbeat's chart figures: always kept in the node's history, pushed through the channel layer
only while a page watches the node (``inference.liveness.remember`` asks in the same round trip)."""

import pytest
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.test import Client

from inference import liveness
from inference.live import node_stats_group, node_stats_history
from inference.services.nodes import node_token_create

pytestmark = pytest.mark.django_db
NAME = "hk-stats-1"


@pytest.fixture
def token(db):
    liveness.forget(NAME)
    yield node_token_create(name=NAME, region="hk")[1]
    liveness.forget(NAME)


def beat(token: str, load1: float) -> None:
    answer = Client().post(
        "/api/v1/nodes/heartbeat",
        {"region": "hk", "inventory": {"cpus": 4, "load1": load1}, "replicas": []},
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {token}",
    )
    assert answer.status_code == 200, answer.content


def test_figures_go_to_the_history_and_to_a_page_only_while_one_watches(
    token, django_capture_on_commit_callbacks
) -> None:
    layer = get_channel_layer()
    page = async_to_sync(layer.new_channel)()
    group = node_stats_group(NAME)
    beat(token, 1.0)  # the node comes online (its callbacks are never run: the test's transaction)
    with django_capture_on_commit_callbacks(execute=True) as sent:
        beat(token, 2.0)
    assert sent == []  # nobody watches: no channel-layer send was even scheduled
    async_to_sync(layer.group_add)(group, page)
    try:
        with django_capture_on_commit_callbacks(execute=True) as sent:
            beat(token, 3.0)
        assert len(sent) == 1
        message = async_to_sync(layer.receive)(page)
    finally:
        async_to_sync(layer.group_discard)(group, page)
    assert message["type"] == "node_stats" and message["payload"]["load1"] == 3.0
    assert [point["load1"] for point in node_stats_history(NAME)][-3:] == [1.0, 2.0, 3.0]


def test_a_heartbeat_is_remembered_without_a_page_and_with_redis_answering(token) -> None:
    stats = liveness.Stats('{"ts": 1}', 10, 60, node_stats_group(NAME))
    remembered = liveness.remember(NAME, {"cpus": 4}, 1000.0, stats)
    assert remembered == liveness.Remembered(kept=True, watched=False)
    assert liveness.seen_all()[NAME] == 1000.0
    assert liveness.inventories([NAME]) == {NAME: {"cpus": 4}}
