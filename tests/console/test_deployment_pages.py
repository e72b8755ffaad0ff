"""The deployment pages' forms: every field explained with its default, batching and the other settings
editable on a running deployment (a rollout, not a restart), refused values named with nothing changed,
and the placement's pending reasons per node."""

from __future__ import annotations

import pytest
from django.test import Client

from inference.models import Deployment
from inference.services.registry import UploadedModel, model_version_upload
from tests.support.tiny_models import COLOURS, colour_classifier

pytestmark = pytest.mark.django_db


@pytest.fixture
def colours(team, owner, tmp_path):
    path = colour_classifier(tmp_path / "c.onnx")
    upload = UploadedModel(name="dp-colours", task="image-classification", model_chunks=[path.read_bytes()],
                           labels_text="\n".join(COLOURS))  # fmt: skip
    version = model_version_upload(team=team, actor=owner, upload=upload)
    return Deployment.objects.create(team=team, name="dp-colours", model_version=version, replicas=2)


def client_for(user) -> Client:
    c = Client()
    c.force_login(user)
    return c


def settings_post(**changes) -> dict:
    form = {"action": "settings", "next": "detail", "region": "hk", "device": "cpu", "max_batch_size": "8",
            "max_queue_delay_ms": "5", "node_selector": ""}  # fmt: skip
    return form | changes


def test_the_create_form_explains_each_field_and_keeps_node_labels(owner, colours):
    c = client_for(owner)
    page = c.get("/deployments/").content.decode()
    form = page.split('id="deploy-form"')[1].split("</form>")[0]
    for words in ("Default: 1.", "Default: Hong Kong.", "Default: CPU.", "Default: 8.", "Default: 5 ms.",
                  "Default: any node."):  # fmt: skip
        assert words in form
    assert 'name="max_batch_size" type="number" min="1" max="256" required value="8"' in form
    c.post("/deployments/", {"name": "dp-labelled", "model_version_id": colours.model_version_id,
                             "replicas": "1", "region": "us", "device": "cpu", "max_batch_size": "16",
                             "max_queue_delay_ms": "2", "node_selector": "gpu=a10, zone=b"})  # fmt: skip
    made = Deployment.objects.get(name="dp-labelled")
    assert (made.region, made.max_batch_size, made.max_queue_delay_ms) == ("us", 16, 2)
    assert made.node_selector == {"gpu": "a10", "zone": "b"}


def test_a_refused_create_comes_back_with_what_was_typed(owner, colours):
    r = client_for(owner).post("/deployments/", {"name": "dp-typed", "model_version_id": colours.model_version_id,
                                                 "max_batch_size": "300", "max_queue_delay_ms": "7"})  # fmt: skip
    page = r.content.decode()
    assert "max_batch_size must be between 1 and 256" in page
    assert 'value="dp-typed"' in page and 'value="300"' in page and 'value="7"' in page
    assert not Deployment.objects.filter(name="dp-typed").exists()


def test_changing_batching_on_the_page_rolls_the_replicas_over(owner, colours):
    page = client_for(owner).get("/deployments/dp-colours/").content.decode()
    assert 'id="settings-form"' in page and "one at a time" in page
    r = client_for(owner).post(
        "/deployments/dp-colours/action", settings_post(max_batch_size="4"), follow=True
    )
    assert "dp-colours: settings done." in r.content.decode()
    colours.refresh_from_db()
    assert colours.max_batch_size == 4
    assert colours.rollout["state"] == "in_progress"
    assert colours.rollout["from"]["max_batch_size"] == 8 and colours.rollout["to"]["max_batch_size"] == 4
    assert "batch ≤4" in r.content.decode()


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"max_batch_size": "0"}, "max_batch_size must be between 1 and 256"),
        ({"max_queue_delay_ms": "soon"}, "max_queue_delay_ms must be a whole number, got &#x27;soon&#x27;"),
        ({"device": "abacus"}, "device must be one of"),
        ({"node_selector": "gpu"}, "labels are key=value pairs separated by commas"),
    ],
)
def test_a_refused_setting_is_named_and_changes_nothing(owner, colours, changes, message):
    r = client_for(owner).post("/deployments/dp-colours/action", settings_post(**changes), follow=True)
    assert message in r.content.decode()
    colours.refresh_from_db()
    assert colours.max_batch_size == 8 and colours.max_queue_delay_ms == 5 and not colours.rollout


def test_a_viewer_gets_no_settings_form_and_an_outsider_no_deployment(viewer, outsider, colours):
    assert 'id="settings-form"' not in client_for(viewer).get("/deployments/dp-colours/").content.decode()
    assert client_for(outsider).get("/deployments/dp-colours/").status_code == 404
    client_for(outsider).post("/deployments/dp-colours/action", settings_post(max_batch_size="2"))
    client_for(viewer).post("/deployments/dp-colours/action", settings_post(max_batch_size="2"))
    colours.refresh_from_db()
    assert colours.max_batch_size == 8


def test_the_page_shows_why_replicas_are_pending_per_node(owner, colours):
    Deployment.objects.filter(pk=colours.pk).update(placement={
        "preferred_region": "hk", "regions": {"hk": 1}, "unplaced": 1, "note": "1 replica(s) could not be placed",
        "reasons": ["hk-1: no free replica slot (4 of 4)", "hk-2: cordoned"], "region_reasons": [],
    })  # fmt: skip
    page = client_for(owner).get("/deployments/dp-colours/").content.decode()
    reasons = page.split('id="placement-reasons"')[1].split("</ul>")[0]
    assert "hk-1: no free replica slot (4 of 4)" in reasons and "hk-2: cordoned" in reasons
    assert "1 replica could not be placed" in page


def test_while_batching_rolls_out_old_runners_keep_their_settings_until_replaced(owner, colours):
    """The agent restarts a runner whose desired spec changes: the old replicas must keep asking for the
    old batching, or every one restarts at once and the deployment stops serving (seen in the browser)."""
    from inference.services.deployments import deployment_reconcile
    from inference.services.nodes import desired_for
    from tests.support.hardware import node_hk_cpu

    node = node_hk_cpu()
    deployment_reconcile(colours.pk)
    old = set(colours.replica_set.values_list("pk", flat=True))
    colours.replica_set.update(state="ready")
    client_for(owner).post("/deployments/dp-colours/action", settings_post(max_batch_size="4"))
    deployment_reconcile(colours.pk)
    asked = {spec["id"]: spec["batching"]["max_batch_size"] for spec in desired_for(node)}
    assert len(asked) == 3 and {asked[pk] for pk in old} == {8}  # both old ones unchanged, serving
    assert {b for pk, b in asked.items() if pk not in old} == {4}  # the one new replica runs the change


def test_autoscaling_is_set_on_the_page_down_to_zero_and_refusals_change_nothing(owner, viewer, colours):
    c = client_for(owner)
    assert 'id="autoscaling-form"' in c.get("/deployments/dp-colours/").content.decode()
    form = {"action": "autoscaling", "next": "detail", "min_replicas": "0", "max_replicas": "3",
            "target_inflight_per_replica": "2.5", "scale_cooldown_s": "30", "scale_to_zero_after_s": "120"}  # fmt: skip
    r = c.post("/deployments/dp-colours/action", form, follow=True)
    page = r.content.decode()
    assert "dp-colours: autoscaling done." in page and "to zero after 120 s without a request" in page
    colours.refresh_from_db()
    assert (colours.min_replicas, colours.max_replicas, colours.target_inflight_per_replica) == (0, 3, 2.5)
    assert (colours.scale_cooldown_s, colours.scale_to_zero_after_s) == (30, 120)
    refused = c.post("/deployments/dp-colours/action", form | {"scale_to_zero_after_s": "never"}, follow=True)
    assert "scale_to_zero_after_s must be a whole number, got &#x27;never&#x27;" in refused.content.decode()
    refused = c.post("/deployments/dp-colours/action", form | {"min_replicas": "5"}, follow=True)
    assert "0 &lt;= min &lt;= max &lt;= 32" in refused.content.decode()
    client_for(viewer).post("/deployments/dp-colours/action", form | {"max_replicas": "0"})
    assert 'id="autoscaling-form"' not in client_for(viewer).get("/deployments/dp-colours/").content.decode()
    colours.refresh_from_db()
    assert (colours.min_replicas, colours.max_replicas, colours.scale_to_zero_after_s) == (0, 3, 120)
