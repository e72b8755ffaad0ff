"""What the console's pages show: benchmark figures without server paths, per-kind call examples, forms
that keep typed values, the styled 404, and the name pattern Chromium's `v`-flag regexes accept."""

import json
import re

import pytest

from inference.models import Deployment, Job, JobKind, JobStatus, Task
from inference.reports import public_result, version_rows
from inference.views import call_example

pytestmark = pytest.mark.django_db

BENCH = {
    "task": "image-classification",
    "path": "/var/lib/lantau/storage/ab/cd/model.onnx",
    "size_bytes": 5_000_000,
    "threads": 2,
    "sequence_length": None,
    "batches": {
        "1": {"p50_ms": 7.512345678901234, "p90_ms": 8.1, "round_p50_ms": [7.6, 7.5], "runs": 30,
              "throughput_per_s": 133.11567890123},
        "8": {"p50_ms": 57.61234567890123, "p90_ms": 60.2, "round_p50_ms": [57.7], "runs": 30,
              "throughput_per_s": 138.8567890123},
    },
}  # fmt: skip


@pytest.fixture
def bench_job(owner, team, colour_version):
    return Job.objects.create(team=team, kind=JobKind.BENCHMARK, source=colour_version, created_by=owner,
                              status=JobStatus.SUCCEEDED, result=BENCH)  # fmt: skip


def test_benchmark_job_page_shows_rounded_figures_and_no_server_path(owner_client, bench_job):
    page = owner_client.get(f"/jobs/{bench_job.pk}/").content.decode()
    assert 'id="benchmark-figures"' in page
    assert "7.51 ms" in page and "57.61 ms" in page and "133.1 items/s" in page and "4.8 MiB" in page
    assert "7.512345678901234" not in page and "/var/lib/lantau" not in page and "storage" not in page


def test_api_job_and_version_output_hold_no_server_path(owner_client, bench_job, colour_version):
    job = owner_client.get(f"/api/v1/jobs/{bench_job.pk}").json()
    assert job["result"]["batches"]["8"]["p50_ms"] == BENCH["batches"]["8"]["p50_ms"]
    assert "path" not in job["result"] and "/var/lib" not in json.dumps(job)
    assert public_result({"a": {"model_path": "/x", "keep": "y", "files": ["/var/lib/lantau/y", "z"]}}) == {
        "a": {"keep": "y", "files": ["z"]}
    }
    # ONNX node names look like paths but are not: a tuning report's excluded nodes keep them.
    assert public_result({"excluded": ["/_fc/Gemm", "/tmp/x.onnx"], "node": "/stem/Conv"}) == {
        "excluded": ["/_fc/Gemm"],
        "node": "/stem/Conv",
    }


def test_benchmark_figures_reach_the_versions_table(owner_client, bench_job, colour_version):
    row = version_rows([colour_version])[0]
    assert (row["p50_b1"], row["p50_b8"]) == (
        BENCH["batches"]["1"]["p50_ms"],
        BENCH["batches"]["8"]["p50_ms"],
    )
    page = owner_client.get("/models/colours/").content.decode()
    assert "57.61" in page and " MiB" in page and " MB<" not in page


def test_deployments_page_shows_the_call_for_each_kind_and_keeps_a_failed_form(owner_client, colour_version):
    from inference.services.deployments import DeploymentSpec, deployment_create

    deployment_create(team=colour_version.model.team, actor=colour_version.created_by,
                      spec=DeploymentSpec(name="colours", model_version_id=colour_version.pk))  # fmt: skip
    form = {"name": "colours", "model_version_id": colour_version.pk, "replicas": "3", "max_batch_size": "16",
            "max_queue_delay_ms": "7", "region": "us"}  # fmt: skip
    r = owner_client.post("/deployments/", form)  # a duplicate name: refused
    page = r.content.decode()
    assert r.status_code == 200 and Deployment.objects.count() == 1
    assert 'name="replicas" type="number" min="0" max="32" value="3"' in page
    assert 'value="16"' in page and 'value="7"' in page and re.search(r'<option value="us"\s+selected', page)
    assert "/v1/deployments/colours/predict" in page and "@cat.jpg" in page
    assert 'data-confirm="Delete colours?' in page and 'data-confirm="Pause colours?' in page
    assert call_example("http://h", "e", Task.FEATURE_EXTRACTION).endswith("http://h/v1/embeddings")
    assert call_example("http://h", "c", Task.TEXT_GENERATION).endswith("http://h/v1/chat/completions")
    assert '{"inputs": [' in call_example("http://h", "t", Task.TEXT_CLASSIFICATION)


def test_name_pattern_is_valid_with_the_v_flag(owner_client, colour_version):
    """Chromium compiles `pattern` with the `v` flag, where an unescaped `-` in a class is a syntax error."""
    for url in ("/deployments/", "/models/"):
        patterns = re.findall(r'pattern="([^"]+)"', owner_client.get(url).content.decode())
        assert patterns and all(r"[a-z0-9\-]" in p for p in patterns)


def test_not_found_page_is_styled_in_the_console_layout(owner_client, settings):
    settings.DEBUG = False
    r = owner_client.get("/models/no-such-model/")
    page = r.content.decode()
    assert r.status_code == 404 and "Page not found" in page and "Back to the overview" in page
    assert "console/lantau.css" in page and "favicon.svg" in page and "/api/v1/docs" in page


def test_server_error_page_renders_in_the_console_layout_without_a_request():
    from django.template import loader

    page = loader.get_template("500.html").render()  # Django renders 500.html with an empty context
    assert "Something went wrong" in page and "console/lantau.css" in page and "Back to the overview" in page
