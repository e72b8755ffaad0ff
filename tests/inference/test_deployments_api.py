import tempfile
from pathlib import Path

import pytest
from django.test import Client

from inference.models import ModelVersion, Replica
from inference.services.deployments import deployment_reconcile
from inference.services.registry import UploadedModel, model_version_upload
from tests.support.tiny_models import COLOURS, colour_classifier

pytestmark = pytest.mark.django_db


def create(client, version, **kw):
    return client.post(
        "/api/v1/deployments",
        {"name": "colours", "model_version_id": version.pk, **kw},
        content_type="application/json",
    )


def test_create_then_reconcile_places_replicas_in_region(
    owner_client, colour_version, node_hk_cpu, node_us_cpu
):
    r = create(owner_client, colour_version, replicas=2, region="us")
    assert r.status_code == 201, r.content
    assert r.json()["status"] == "unplaced" and r.json()["model_version"] == "colours:1"
    result = deployment_reconcile(r.json()["id"])
    assert result["placed"] == 2
    regions = sorted(Replica.objects.values_list("node__region", flat=True))
    assert regions == ["us", "us"]  # the region preference outranks spreading over nodes
    assert deployment_reconcile(r.json()["id"])["placed"] == 0  # idempotent


def test_scale_down_and_pause_remove_replicas(owner_client, colour_version, node_hk_cpu):
    d = create(owner_client, colour_version, replicas=2).json()
    deployment_reconcile(d["id"])
    assert Replica.objects.count() == 2
    r = owner_client.patch("/api/v1/deployments/colours", {"replicas": 1}, content_type="application/json")
    assert r.status_code == 200 and r.json()["replicas"] == 1
    deployment_reconcile(d["id"])
    assert Replica.objects.count() == 1
    owner_client.patch("/api/v1/deployments/colours", {"state": "paused"}, content_type="application/json")
    deployment_reconcile(d["id"])
    assert Replica.objects.count() == 0


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("name", "Bad Name", "deployment name"),
        ("replicas", 99, "replicas"),
        ("region", "eu", "region"),
        ("device", "tpu", "device"),
        ("max_batch_size", 0, "max_batch_size"),
        ("max_queue_delay_ms", 5000, "max_queue_delay_ms"),
    ],
)
def test_invalid_specs_are_422_with_the_field_named(owner_client, colour_version, field, value, message):
    r = create(owner_client, colour_version, **{field: value})
    assert r.status_code == 422 and message in r.json()["error"]["message"]


def test_malformed_json_is_a_clear_error(owner_client):
    r = owner_client.post("/api/v1/deployments", "{nope", content_type="application/json")
    assert r.status_code in (400, 422) and r.json()["error"]["message"]
    r = owner_client.post("/api/v1/deployments", {"name": "x"}, content_type="application/json")
    assert r.status_code == 422 and "model_version_id" in r.json()["error"]["message"]


def test_duplicate_name_is_409(owner_client, colour_version):
    assert create(owner_client, colour_version).status_code == 201
    r = create(owner_client, colour_version)
    assert r.status_code == 409 and r.json()["error"]["type"] == "conflict"


def test_cannot_deploy_another_teams_version(outsider, colour_version):
    c = Client()
    c.force_login(outsider)
    r = create(c, colour_version)
    assert r.status_code == 404


def test_deployed_version_cannot_be_deleted(owner_client, colour_version):
    create(owner_client, colour_version)
    r = owner_client.delete(f"/api/v1/models/versions/{colour_version.pk}")
    assert r.status_code == 409 and "deployed" in r.json()["error"]["message"]
    assert owner_client.delete("/api/v1/deployments/colours").status_code == 204
    assert owner_client.delete(f"/api/v1/models/versions/{colour_version.pk}").status_code == 204


def test_deployment_pages_create_and_pause(owner_client, colour_version):
    r = owner_client.post(
        "/deployments/", {"name": "page-dep", "model_version_id": colour_version.pk, "replicas": 1}
    )
    assert r.status_code == 302
    page = owner_client.get("/deployments/")
    assert b"page-dep" in page.content
    owner_client.post("/deployments/page-dep/action", {"action": "pause"})
    assert b"Resume" in owner_client.get("/deployments/").content
    bad = owner_client.post(
        "/deployments/", {"name": "BAD", "model_version_id": colour_version.pk}, follow=True
    )
    assert b"deployment name must be" in bad.content


def test_version_update_rolls_over_without_dropping_ready_replicas(
    no_bake, owner_client, colour_version, node_hk_cpu, owner, team
):
    from inference.services.registry import UploadedModel, model_version_upload
    from tests.support.tiny_models import COLOURS, colour_classifier

    d = create(owner_client, colour_version, replicas=1).json()
    deployment_reconcile(d["id"])
    Replica.objects.update(state="ready", url="http://127.0.0.1:1")
    import tempfile
    from pathlib import Path

    path = colour_classifier(Path(tempfile.mkdtemp()) / "v2.onnx", size=8)
    v2 = model_version_upload(
        team=team,
        actor=owner,
        upload=UploadedModel(
            name="colours",
            task="image-classification",
            model_chunks=[path.read_bytes()],
            labels_text="\n".join(COLOURS),
        ),
    )
    r = owner_client.patch(
        "/api/v1/deployments/colours", {"model_version_id": v2.pk}, content_type="application/json"
    )
    assert r.status_code == 200 and r.json()["model_version"] == "colours:2"
    result = deployment_reconcile(d["id"])
    assert (
        result["placed"] == 1 and result["outdated_serving"] == 1
    )  # the old one serves until the new is ready
    assert sorted(Replica.objects.values_list("model_version__number", "state")) == [
        (1, "ready"),
        (2, "pending"),
    ]
    Replica.objects.filter(model_version=v2).update(state="ready")
    deployment_reconcile(d["id"])
    assert list(Replica.objects.values_list("model_version__number", flat=True)) == [2]


def test_version_update_refuses_non_onnx_and_other_teams_versions(owner_client, colour_version, outsider):
    create(owner_client, colour_version)
    r = owner_client.patch(
        "/api/v1/deployments/colours", {"model_version_id": 999999}, content_type="application/json"
    )
    assert r.status_code == 404


def test_deployment_page_is_for_the_team_only(owner_client, colour_version, outsider):
    create(owner_client, colour_version)
    page = owner_client.get("/deployments/colours/")
    assert page.status_code == 200 and b"chart-latency" in page.content
    other = Client()
    other.force_login(outsider)
    assert other.get("/deployments/colours/").status_code == 404


def flashes(response) -> list[str]:
    return [str(m) for m in response.context["messages"]]


@pytest.mark.parametrize("replicas", [33, -1])
def test_create_and_update_refuse_the_same_replicas_with_the_same_message(
    owner_client, colour_version, replicas
):
    refused = create(owner_client, colour_version, replicas=replicas)
    assert refused.status_code == 422
    message = refused.json()["error"]["message"]
    assert message == "replicas must be between 0 and 32"
    form = {"name": "colours", "model_version_id": colour_version.pk, "replicas": replicas}
    assert flashes(owner_client.post("/deployments/", form)) == [message]
    assert create(owner_client, colour_version, replicas=2).status_code == 201
    patched = owner_client.patch(
        "/api/v1/deployments/colours", {"replicas": replicas}, content_type="application/json"
    )
    assert patched.status_code == 422 and patched.json()["error"]["message"] == message
    page = owner_client.post(
        "/deployments/colours/action", {"action": "scale", "replicas": replicas}, follow=True
    )
    assert flashes(page) == [message]
    assert owner_client.get("/api/v1/deployments/colours").json()["replicas"] == 2


def test_create_and_update_refuse_another_teams_version_with_the_same_message(
    owner_client, colour_version, outsider
):
    globex = outsider.memberships.get().team
    path = colour_classifier(Path(tempfile.mkdtemp()) / "theirs.onnx")
    theirs = model_version_upload(
        team=globex,
        actor=outsider,
        upload=UploadedModel(
            name="theirs",
            task="image-classification",
            model_chunks=[path.read_bytes()],
            labels_text="\n".join(COLOURS),
        ),
    )
    refused = create(owner_client, theirs)
    assert refused.status_code == 404
    assert create(owner_client, colour_version).status_code == 201
    patched = owner_client.patch(
        "/api/v1/deployments/colours", {"model_version_id": theirs.pk}, content_type="application/json"
    )
    assert patched.status_code == 404 and patched.json()["error"] == refused.json()["error"]
    page = owner_client.post(
        "/deployments/colours/action", {"action": "version", "model_version_id": theirs.pk}, follow=True
    )
    assert flashes(page) == [refused.json()["error"]["message"]]
    assert owner_client.get("/api/v1/deployments/colours").json()["model_version"] == "colours:1"


def test_a_batching_change_rolls_out_one_replica_at_a_time(
    no_bake, owner_client, colour_version, node_hk_cpu
):
    from inference.services.nodes import desired_for

    d = create(owner_client, colour_version, replicas=2).json()
    deployment_reconcile(d["id"])
    Replica.objects.update(state="ready", url="http://127.0.0.1:1")
    old = set(Replica.objects.values_list("pk", flat=True))
    r = owner_client.patch("/api/v1/deployments/colours", {"max_batch_size": 16, "max_queue_delay_ms": 2},
                           content_type="application/json")  # fmt: skip
    assert r.status_code == 200 and (r.json()["max_batch_size"], r.json()["max_queue_delay_ms"]) == (16, 2)
    steps = []
    for _ in range(4):
        deployment_reconcile(d["id"])
        deployment_reconcile(d["id"])  # idempotent: a second pass changes nothing
        rows = list(Replica.objects.values_list("pk", "state"))
        steps.append(sorted(("old" if pk in old else "new", state) for pk, state in rows))
        Replica.objects.exclude(pk__in=old).update(state="ready")
    assert steps == [
        [("new", "pending"), ("old", "ready"), ("old", "ready")],  # one new starts; both old serve
        [("new", "pending"), ("new", "ready"), ("old", "ready")],  # one old retired per new one ready
        [("new", "ready"), ("new", "ready")],
        [("new", "ready"), ("new", "ready")],
    ]
    batching = {spec["batching"]["max_batch_size"] for spec in desired_for(node_hk_cpu)}
    assert batching == {16}


def test_a_device_change_rolls_out_one_replica_at_a_time_onto_a_gpu(
    no_bake, owner_client, colour_version, node_hk_cpu, node_hk_a10_24g
):
    """cpu -> cuda on a running deployment: new replicas go where a GPU is (pinned to one), one at a
    time, each old CPU replica serving until a new one is ready; the agents are told the new device."""
    from inference.services.nodes import desired_for

    d = create(owner_client, colour_version, replicas=2).json()
    node_hk_a10_24g.mode = "cordoned"  # the first placement: CPU only
    node_hk_a10_24g.save()
    deployment_reconcile(d["id"])
    node_hk_a10_24g.mode = "active"
    node_hk_a10_24g.save()
    Replica.objects.update(state="ready", url="http://127.0.0.1:1")
    old = set(Replica.objects.values_list("pk", flat=True))
    r = owner_client.patch("/api/v1/deployments/colours", {"device": "cuda"}, content_type="application/json")
    assert (
        r.status_code == 200
        and r.json()["device"] == "cuda"
        and r.json()["rollout"]["state"] == "in_progress"
    )
    steps = []
    for _ in range(3):
        deployment_reconcile(d["id"])
        rows = Replica.objects.values_list("pk", "state", "node__name", "gpu_index")
        steps.append(
            sorted(("old" if pk in old else "new", state, node, gpu) for pk, state, node, gpu in rows)
        )
        Replica.objects.exclude(pk__in=old).update(state="ready")
    gpu = node_hk_a10_24g.name
    assert steps == [
        [("new", "pending", gpu, 0), ("old", "ready", "hk-cpu-1", None), ("old", "ready", "hk-cpu-1", None)],
        [("new", "pending", gpu, 0), ("new", "ready", gpu, 0), ("old", "ready", "hk-cpu-1", None)],
        [("new", "ready", gpu, 0), ("new", "ready", gpu, 0)],
    ]
    assert {spec["device"] for spec in desired_for(node_hk_a10_24g)} == {"cuda"}
    assert owner_client.get("/api/v1/deployments/colours").json()["rollout"]["state"] == "done"


@pytest.mark.parametrize(
    "body, message",
    [
        ({"device": "tpu"}, "device must be one of cpu, cuda, tensorrt"),
        ({"max_batch_size": 0}, "max_batch_size must be between 1 and 256"),
        ({"max_queue_delay_ms": 5000}, "max_queue_delay_ms must be between 0 and 1000"),
        ({"region": "eu"}, "region must be one of hk, us"),
        ({"node_selector": {"GPU": "a10"}}, "node_selector: 'GPU' is not a label name"),
        ({"node_selector": {"gpu": 1}}, "node_selector.gpu: "),
    ],
)
def test_runtime_changes_are_checked_like_a_new_deployment(owner_client, colour_version, body, message):
    create(owner_client, colour_version)
    r = owner_client.patch("/api/v1/deployments/colours", body, content_type="application/json")
    assert r.status_code == 422 and r.json()["error"]["message"].startswith(message), r.content
    assert owner_client.get("/api/v1/deployments/colours").json()["device"] == "cpu"


def test_an_unplaceable_deployment_says_why_per_node_in_the_api_and_on_its_page(
    owner_client, colour_version, node_us_cpu, node_hk_a10_busy
):
    ModelVersion.objects.filter(pk=colour_version.pk).update(size_bytes=int(1.3 * 2**30))
    d = create(owner_client, colour_version, device="cuda", node_selector={"gpu": "a10"}).json()
    deployment_reconcile(d["id"])
    placement = owner_client.get("/api/v1/deployments/colours").json()["placement"]
    assert placement["unplaced"] == 1
    assert sorted(placement["reasons"]) == [
        "hk-gpu-2: needs 3.1 GiB, 1.2 GiB free",
        "us-cpu-1: labels gpu=a10 not matched (node has none)",
    ]
    page = owner_client.get("/deployments/colours/").content.decode()
    assert "hk-gpu-2: needs 3.1 GiB, 1.2 GiB free" in page and "could not be placed" in page


def test_a_deployment_outside_its_preferred_region_says_where_and_why(
    owner_client, colour_version, node_hk_cpu
):
    from tests.support import hardware

    hardware.node("us-cpu-full", "us", max_replicas=0)
    d = create(owner_client, colour_version, region="us").json()
    deployment_reconcile(d["id"])
    shown = owner_client.get("/api/v1/deployments/colours").json()
    assert shown["region"] == "us" and shown["replica_set"][0]["region"] == "hk"
    placement = shown["placement"]
    assert placement["regions"] == {"hk": 1} and placement["in_preferred_region"] is False
    assert placement["note"] == "preferred region us has no usable node (no node there can take it): 1 in hk"
    assert placement["region_reasons"] == ["us-cpu-full: full (0 of 0 replicas)"]
    page = owner_client.get("/deployments/colours/").content.decode()
    assert 'id="placement-note"' in page and "us-cpu-full: full (0 of 0 replicas)" in page
