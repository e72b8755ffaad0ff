"""Job rows: what may be started, cancel and retry rules, the reaper, and the API around them."""

from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from inference.jobs.registry import kind_label, kinds
from inference.models import Job, JobKind, JobStatus, ModelVersion
from inference.services.jobs import jobs_reap

pytestmark = pytest.mark.django_db


def start(client, version, kind="quantize_int8", **options):
    return client.post(
        "/api/v1/jobs",
        {"version_id": version.pk, "kind": kind, "options": options},
        content_type="application/json",
    )


def test_start_queues_a_job_with_an_audit_trail(owner_client, colour_version):
    r = start(owner_client, colour_version, mode="dynamic")
    assert r.status_code == 201, r.content
    body = r.json()
    assert (
        body["status"] == "queued"
        and body["source"] == "colours:1"
        and body["options"] == {"mode": "dynamic"}
    )
    assert owner_client.get(f"/api/v1/jobs/{body['id']}").json()["kind"] == "quantize_int8"


@pytest.mark.parametrize(
    "kind, options, message",
    [
        ("rewrite_in_rust", {}, "unknown job kind"),
        ("quantize_int8", {"bogus": 1}, "unknown option"),
        ("export_onnx", {}, "already ONNX"),
        ("evaluate", {}, "has none"),
    ],
)
def test_invalid_jobs_are_refused_with_a_reason(owner_client, colour_version, kind, options, message):
    r = start(owner_client, colour_version, kind, **options)
    assert r.status_code == 422 and message in r.json()["error"]["message"]
    assert not Job.objects.exists()


def test_viewer_cannot_start_and_outsider_cannot_see(colour_version, viewer, outsider, owner_client):
    c = Client()
    c.force_login(viewer)
    assert start(c, colour_version).status_code == 403
    job_id = start(owner_client, colour_version).json()["id"]
    o = Client()
    o.force_login(outsider)
    assert o.get(f"/api/v1/jobs/{job_id}").status_code == 404
    assert o.post(f"/api/v1/jobs/{job_id}/cancel").status_code == 404
    assert start(o, colour_version).status_code == 404


def test_cancel_a_queued_job_then_retry_it(owner_client, colour_version):
    job_id = start(owner_client, colour_version).json()["id"]
    r = owner_client.post(f"/api/v1/jobs/{job_id}/cancel")
    assert r.status_code == 200 and r.json()["status"] == "cancelled"
    again = owner_client.post(f"/api/v1/jobs/{job_id}/cancel")
    assert again.status_code == 409
    retried = owner_client.post(f"/api/v1/jobs/{job_id}/retry")
    assert retried.status_code == 200 and retried.json()["status"] == "queued"
    assert "retried" in [line["message"] for line in owner_client.get(f"/api/v1/jobs/{job_id}/log").json()]


def test_cancel_of_a_running_job_is_a_request_honoured_by_the_worker(owner_client, colour_version):
    job_id = start(owner_client, colour_version).json()["id"]
    Job.objects.filter(pk=job_id).update(status=JobStatus.RUNNING)
    r = owner_client.post(f"/api/v1/jobs/{job_id}/cancel")
    assert r.status_code == 200 and r.json()["status"] == "running"
    assert Job.objects.get(pk=job_id).cancel_requested


def test_succeeded_jobs_cannot_be_retried(owner_client, colour_version):
    job_id = start(owner_client, colour_version).json()["id"]
    Job.objects.filter(pk=job_id).update(status=JobStatus.SUCCEEDED)
    r = owner_client.post(f"/api/v1/jobs/{job_id}/retry")
    assert r.status_code == 409 and "succeeded" in r.json()["error"]["message"]


def test_reaper_fails_running_jobs_whose_worker_went_silent(owner_client, colour_version, settings):
    settings.JOB_HEARTBEAT_STALE_S = 30
    stale = start(owner_client, colour_version).json()["id"]
    fresh = start(owner_client, colour_version).json()["id"]
    Job.objects.filter(pk=stale).update(
        status=JobStatus.RUNNING, heartbeat_at=timezone.now() - timedelta(minutes=2)
    )
    Job.objects.filter(pk=fresh).update(status=JobStatus.RUNNING, heartbeat_at=timezone.now())
    assert jobs_reap() == 1
    job = Job.objects.get(pk=stale)
    assert job.status == "failed" and "stopped responding" in job.error and job.finished_at
    assert Job.objects.get(pk=fresh).status == "running"


def test_model_page_shows_versions_chart_and_jobs(owner_client, colour_version):
    start(owner_client, colour_version, mode="dynamic")
    page = owner_client.get("/models/colours/")
    assert page.status_code == 200
    html = page.content.decode()
    assert "colours:1" in html and 'id="tradeoff"' in html and "data-job=" in html
    assert "INT8 quantization" in html
    assert owner_client.get("/static-vendor/plotly.min.js").status_code == 200
    assert owner_client.get("/models/nope/").status_code == 404


def test_job_page_shows_status_log_and_is_private(owner_client, colour_version, outsider):
    job_id = start(owner_client, colour_version, mode="dynamic").json()["id"]
    owner_client.post(f"/api/v1/jobs/{job_id}/cancel")
    page = owner_client.get(f"/jobs/{job_id}/")
    assert page.status_code == 200
    html = page.content.decode()
    assert "cancelled" in html and "&quot;mode&quot;: &quot;dynamic&quot;" in html and "Retry" in html
    other = Client()
    other.force_login(outsider)
    assert other.get(f"/jobs/{job_id}/").status_code == 404


@pytest.mark.parametrize(
    "kind, options, named",
    [
        ("quantize_int8", {"bogus": 1}, "options.bogus: unknown option for quantize_int8"),
        ("benchmark", {"runs": 5, "limit": 10}, "options.limit: unknown option for benchmark"),
        (
            "fp16",
            {"keep_io_types": True, "calibration_limit": 8},
            "options.calibration_limit: unknown option",
        ),
    ],
)
def test_unknown_option_is_refused_naming_it(owner_client, colour_version, kind, options, named):
    r = start(owner_client, colour_version, kind, **options)
    assert r.status_code == 422
    assert r.json()["error"] == {"type": "validation_error", "message": r.json()["error"]["message"]}
    assert r.json()["error"]["message"].startswith(named)
    assert not Job.objects.exists()


@pytest.mark.parametrize(
    "kind, options, named",
    [
        ("benchmark", {"runs": 1001}, "options.runs: Input should be less than or equal to 1000"),
        ("benchmark", {"runs": 0}, "options.runs: Input should be greater than or equal to 1"),
        ("optimize", {"level": "all"}, "options.level: Input should be 'basic' or 'extended'"),
        ("quantize_int8", {"mode": "static", "calibration_limit": 10001}, "options.calibration_limit: "),
        ("quantize_int8", {"exclude_nodes": "Conv_0"}, "options.exclude_nodes: "),
    ],
)
def test_out_of_bounds_option_is_refused_naming_it(owner_client, colour_version, kind, options, named):
    r = start(owner_client, colour_version, kind, **options)
    assert r.status_code == 422 and r.json()["error"]["type"] == "validation_error"
    assert r.json()["error"]["message"].startswith(named), r.json()
    assert not Job.objects.exists()


def test_options_that_fit_the_schema_are_stored_as_given(owner_client, colour_version):
    r = start(owner_client, colour_version, "benchmark", runs=1000)
    assert r.status_code == 201 and r.json()["options"] == {"runs": 1000}
    r = start(owner_client, colour_version, "optimize")
    assert r.status_code == 201 and r.json()["options"] == {}


def test_a_kind_that_needs_onnx_refuses_a_hugging_face_source_with_a_way_out(
    owner_client, owner, colour_version
):
    folder = ModelVersion.objects.create(
        model=colour_version.model,
        number=2,
        format="huggingface",
        sha256="0" * 64,
        size_bytes=1,
        created_by=owner,
    )
    for kind in ("quantize_int8", "fp16", "optimize", "benchmark"):
        r = start(owner_client, folder, kind)
        assert r.status_code == 422
        assert r.json()["error"]["message"] == (
            f"{kind} needs an ONNX version; export this huggingface version first"
        )
    assert start(owner_client, folder, "export_onnx").status_code == 201


def test_import_jobs_start_from_an_upload_not_from_the_jobs_api(owner_client, colour_version):
    r = start(owner_client, colour_version, "import")
    assert r.status_code == 422 and "not started here" in r.json()["error"]["message"]


def test_registry_lists_every_kind_the_database_holds():
    every = kinds()
    assert set(every) == {k.value for k in JobKind}
    assert set(kinds(startable=True)) == set(every) - {"import"}
    assert Job._meta.get_field("kind").choices is None  # the model layer imports no job kind
    assert {name: kind_label(name) for name in every} == {name: kind.label for name, kind in every.items()}
    assert kind_label("retired_kind") == "retired_kind"  # a row of a kind no longer registered still shows
    for kind in every.values():
        assert kind.Options.model_config["extra"] == "forbid", kind.name
        assert all(f.description for f in kind.Options.model_fields.values()), kind.name


def test_openapi_document_shows_each_kinds_options(owner_client):
    doc = owner_client.get("/api/v1/openapi.json").json()
    job_in = doc["components"]["schemas"]["JobIn"]
    assert set(job_in["required"]) == {"version_id", "kind"}
    assert set(job_in["properties"]["kind"]["enum"]) == set(kinds(startable=True))
    options = job_in["properties"]["options"]
    by_title = {schema["title"]: schema for schema in options["anyOf"]}
    for name, kind in kinds(startable=True).items():
        schema = by_title[options["x-options-by-kind"][name]]
        assert schema["additionalProperties"] is False
        assert set(schema["properties"]) == set(kind.Options.model_fields)
    assert by_title["BenchmarkOptions"]["properties"]["runs"]["maximum"] == 1000
    assert by_title["EvaluateOptions"]["properties"]["limit"]["maximum"] == 10000
    assert "static" in str(by_title["QuantizeInt8Options"]["properties"]["mode"])
