"""Fuzzing the management API and the `/v1/` contract, plus regression tests for what fuzzing found.

The fuzz tests drive schemathesis (its Python API, with Hypothesis) against a real console (the `stack`
fixture) from each published OpenAPI document, with a bounded number of examples per operation; every
answer must be something other than a 5xx, and where the document states the answer's shape, match it.
The in-process regression tests pin each 500 the fuzzer found to the precise status it now gets.
"""

from __future__ import annotations

import json
from collections import Counter

import pytest
import schemathesis
from django.test import Client
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import response_schema_conformance

from inference.gateway.app import _OPENAI, _PREDICT
from inference.gateway.openapi import OPENAPI_PATH, OPENAPI_V1
from inference.services.registry import UploadedModel, model_version_upload
from tests.support.deployments import deploy_colours, deploy_tiny_chat
from tests.support.tiny_models import COLOURS, colour_classifier

# Examples per operation: about 30 management operations (some 1,200 requests, the size of the run
# that found the bugs below) and 6 /v1/ ones keep both fuzz tests under a minute on two cores.
# Generation is derandomized, so a failure reproduces on the next run.
MANAGEMENT_EXAMPLES = 20  # per operation; the management API has grown past 60 operations
V1_EXAMPLES = 60
_FINAL_JOB_STATES = {"succeeded", "failed", "cancelled"}


def _upload(team, owner, path, name: str):
    upload = UploadedModel(
        name=name,
        task="image-classification",
        model_chunks=[path.read_bytes()],
        labels_text="\n".join(COLOURS),
    )
    return model_version_upload(team=team, actor=owner, upload=upload)


@pytest.fixture
def colour_version(owner, team, tmp_path):
    return _upload(team, owner, colour_classifier(tmp_path / "c.onnx"), "colours")


@pytest.fixture
def other_model_version(owner, team, tmp_path):
    """A version of a second model of the same team (what the fuzzer swapped deployments to)."""
    return _upload(team, owner, colour_classifier(tmp_path / "other.onnx"), "other-colours")


@pytest.mark.django_db
def test_a_deployment_cannot_move_to_a_version_of_another_model(
    owner_client: Client, colour_version, other_model_version
):
    created = owner_client.post(
        "/api/v1/deployments",
        {"name": "colours", "model_version_id": colour_version.pk},
        content_type="application/json",
    )
    assert created.status_code == 201, created.content
    r = owner_client.patch(
        "/api/v1/deployments/colours",
        {"model_version_id": other_model_version.pk},
        content_type="application/json",
    )
    assert r.status_code == 422
    assert r.json()["error"]["type"] == "validation_error"
    assert "another version of that model" in r.json()["error"]["message"]
    shown = owner_client.get("/api/v1/deployments/colours").json()
    assert shown["model_version"] == "colours:1"  # nothing changed


@pytest.mark.django_db
def test_a_deployment_moves_to_another_version_of_its_own_model(owner_client: Client, owner, team, tmp_path):
    path = colour_classifier(tmp_path / "c.onnx")
    first, second = (_upload(team, owner, path, "colours") for _ in range(2))
    owner_client.post(
        "/api/v1/deployments",
        {"name": "colours", "model_version_id": first.pk},
        content_type="application/json",
    )
    r = owner_client.patch(
        "/api/v1/deployments/colours", {"model_version_id": second.pk}, content_type="application/json"
    )
    assert r.status_code == 200 and r.json()["model_version"] == "colours:2"


@pytest.mark.django_db
@pytest.mark.parametrize(
    "content_type",
    ["multipart/form-data", "multipart/form-data; boundary=", "multipart/form-data; boundary=\u00e9"],
)
def test_an_upload_with_a_broken_multipart_header_is_400_not_500(owner_client: Client, content_type):
    r = owner_client.generic("POST", "/api/v1/models", b"--x\r\n\r\n--x--\r\n", content_type=content_type)
    assert r.status_code == 400, r.content
    assert r.json()["error"]["type"] == "bad_request"
    assert "multipart" in r.json()["error"]["message"]


@pytest.mark.django_db
def test_an_audit_export_with_a_far_utc_offset_completes_and_an_overflow_is_422(owner_client: Client):
    """Found by the fuzzer: PostgreSQL refused `+23:42` half-way through the CSV stream; the client hung."""
    far = owner_client.get("/api/v1/audit", {"format": "csv", "since": "0413-10-20T08:15:42+23:42"})
    assert far.status_code == 200
    assert b"".join(far.streaming_content).startswith(b"id,created_at,actor")
    over = owner_client.get("/api/v1/audit", {"format": "csv", "until": "9999-12-31T23:00:00-05:00"})
    assert over.status_code == 422 and "until is out of range" in over.json()["error"]["message"]


@pytest.mark.django_db
@pytest.mark.parametrize("fmt", ["json", "csv"])
def test_an_audit_filter_holding_a_nul_character_is_422(owner_client: Client, fmt):
    r = owner_client.get("/api/v1/audit", {"format": fmt, "actor": "\x00A"})
    assert r.status_code == 422 and "NUL" in r.json()["error"]["message"]


@pytest.mark.django_db
def test_job_options_holding_a_nul_character_are_422_and_no_job_is_stored(
    owner_client: Client, colour_version
):
    """Found by the fuzzer: PostgreSQL's jsonb refuses \\u0000, which surfaced as a 500."""
    r = owner_client.post(
        "/api/v1/jobs",
        {"version_id": colour_version.pk, "kind": "fp16", "options": {"op_block_list": ["\x00Conv"]}},
        content_type="application/json",
    )
    assert r.status_code == 422 and r.json()["error"]["type"] == "validation_error"
    assert owner_client.get("/api/v1/jobs").json() == []


# -- the /v1/ document ---------------------------------------------------------------------------------


def test_the_v1_document_names_every_gateway_route():
    paths = set(OPENAPI_V1["paths"])
    assert _OPENAI | {"/v1/models", OPENAPI_PATH} <= paths
    predict = [p for p in paths if _PREDICT.match(p.replace("{name}", "colours"))]
    assert predict == ["/v1/deployments/{name}/predict"]
    assert paths == _OPENAI | {"/v1/models", OPENAPI_PATH, *predict}  # and nothing the gateway lacks
    for path, methods in OPENAPI_V1["paths"].items():
        for method, operation in methods.items():
            codes = set(operation["responses"])
            assert "200" in codes, (method, path)
            if path != OPENAPI_PATH:
                assert {"401", "403"} <= codes, (method, path)


# -- fuzzing through real processes ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def fuzz_team(stack, tmp_path_factory):
    """Team `fuzz` with a manage and an inference key, a colour classifier and a tiny chat deployed."""
    stack.user("fuzzy", "fuzz", "owner")
    keys = {"manage": stack.api_key("fuzzy", "manage"), "infer": stack.api_key("fuzzy", "inference")}
    workdir = tmp_path_factory.mktemp("fuzz")
    deploy_colours(stack, keys["manage"], "fuzz-colours", workdir)
    deploy_tiny_chat(stack, keys["manage"], "fuzzy", "fuzz-chat", workdir)
    with stack.client(keys["manage"]) as api:
        stack.wait_deployment(api, "fuzz-colours", timeout=120)
        stack.wait_deployment(api, "fuzz-chat", timeout=120)
    yield keys
    _tidy_fuzz_team(stack, keys["manage"])


def _stop_fuzz_jobs(stack, manage_key: str) -> None:
    """Jobs the fuzzer started must not keep the shared worker busy for the tests that follow."""
    with stack.client(manage_key) as api:
        for job in api.get("/api/v1/jobs").json():
            if job["status"] not in _FINAL_JOB_STATES:
                api.post(f"/api/v1/jobs/{job['id']}/cancel")


def _tidy_fuzz_team(stack, manage_key: str) -> None:
    """Nor may its deployments keep runners on the shared node."""
    _stop_fuzz_jobs(stack, manage_key)
    with stack.client(manage_key) as api:
        for deployment in api.get("/api/v1/deployments").json():
            api.delete(f"/api/v1/deployments/{deployment['name']}")


def _fuzz(schema, *, base_url: str, key: str, examples: int, checks: list, tweak=None):
    """Run every operation of ``schema`` ``examples`` times.

    Returns one line per failing operation, and the statuses each operation answered (to show the
    cases reached what they were meant to reach)."""
    failures: list[str] = []
    statuses: dict[str, Counter] = {}
    for result in schema.get_all_operations():
        operation = result.ok()
        strategy = operation.as_strategy()
        if tweak is not None:
            strategy = tweak(operation, strategy)

        @settings(
            max_examples=examples,
            deadline=None,
            database=None,
            derandomize=True,
            phases=[Phase.explicit, Phase.generate],  # no shrinking: report, don't spend minutes minimising
            suppress_health_check=list(HealthCheck),
        )
        @given(case=strategy)
        def call(case):
            response = case.call(base_url=base_url, headers={"Authorization": f"Bearer {key}"}, timeout=30)
            statuses.setdefault(case.operation.label, Counter())[response.status_code] += 1
            case.validate_response(response, checks=checks)

        try:
            call()
        except (
            Exception,
            BaseExceptionGroup,
        ) as exc:  # a failed check: keep going so one run lists every operation at fault
            notes = "\n".join(getattr(exc, "__notes__", []))  # schemathesis adds the curl reproduction
            failures.append(f"{operation.label}: {str(exc)[:1500]}\n{notes[:1500]}")
    return failures, statuses


def _management_cases(known: dict[str, list]):
    """Half the cases use names and ids that exist (``known``: field name -> values) so they get past
    the 404s; and the fuzzer must not spend the shared node: at most one replica per deployment."""

    def aim(pair):
        case, use_known = pair
        fields = [case.path_parameters or {}, case.body if isinstance(case.body, dict) else {}]
        for values in fields:
            for field, choices in known.items():
                if use_known and field in values:
                    values[field] = choices[hash((case.operation.label, field)) % len(choices)]
        body = fields[1]
        for field in ("replicas", "min_replicas", "max_replicas"):  # autoscaling bounds too
            if isinstance(body.get(field), int):
                body[field] = max(0, min(body[field], 1))
        return case

    return lambda operation, strategy: st.tuples(strategy, st.booleans()).map(aim)


def _v1_case(operation, strategy):
    """Half the cases name a seeded deployment so they reach a runner; the rest stay as generated."""
    names = st.sampled_from(["fuzz-colours", "fuzz-chat", None])

    def aim(pair):
        case, name = pair
        if name is None:
            return case
        if "name" in (case.path_parameters or {}):
            case.path_parameters["name"] = name
        if isinstance(case.body, dict) and "model" in case.body:
            case.body["model"] = name
        return case

    return st.tuples(strategy, names).map(aim)


@pytest.mark.e2e
def test_the_v1_document_is_served_without_a_key_and_each_route_exists(stack, fuzz_team):
    with stack.client() as anonymous:
        served = anonymous.get(OPENAPI_PATH)
    assert served.status_code == 200 and served.json() == json.loads(json.dumps(OPENAPI_V1))
    with stack.client(fuzz_team["infer"]) as c:
        for path, methods in OPENAPI_V1["paths"].items():
            wrong = "DELETE" if "delete" not in methods else "PUT"
            r = c.request(wrong, path.replace("{name}", "fuzz-colours"))
            assert r.status_code == 405 and r.json()["error"]["type"] == "method_not_allowed", path


@pytest.mark.e2e
def test_predict_on_a_chat_deployment_is_404_naming_the_chat_routes(stack, fuzz_team):
    """Found by the fuzzer: a text-generation runner fell through to the image path and answered 500."""
    with stack.client(fuzz_team["infer"]) as c:
        r = c.post("/v1/deployments/fuzz-chat/predict", files={"file": ("x.png", b"\x89PNG")})
    assert r.status_code == 404 and "/v1/chat/completions" in r.json()["error"]["message"]


@pytest.mark.e2e
def test_fuzzing_the_v1_contract_finds_no_server_error(stack, fuzz_team):
    schema = schemathesis.openapi.from_dict(OPENAPI_V1)
    failures, statuses = _fuzz(
        schema,
        base_url=stack.url,
        key=fuzz_team["infer"],
        examples=V1_EXAMPLES,
        checks=[not_a_server_error, response_schema_conformance],
        tweak=_v1_case,
    )
    print(statuses)
    assert not failures, "\n\n".join(failures)
    # 200 and 422 come only from runners (the gateway answers 400, 401, 404): cases reached both.
    for label in ("POST /v1/chat/completions", "POST /v1/deployments/{name}/predict"):
        assert statuses[label][200] + statuses[label][422] > 0, statuses[label]


@pytest.mark.e2e
def test_fuzzing_the_management_api_finds_no_server_error(stack, fuzz_team):
    schema = schemathesis.openapi.from_url(f"{stack.url}/api/v1/openapi.json")
    schema = schema.exclude(method="DELETE", path_regex=r"^/api/v1/(keys|team)/")
    with stack.client(fuzz_team["manage"]) as api:
        deployments = api.get("/api/v1/deployments").json()
    versions = [d["model_version_id"] for d in deployments]
    known = {"name": [d["name"] for d in deployments], "model_version_id": versions, "version_id": versions}
    failures, statuses = _fuzz(
        schema,
        base_url=stack.url,
        key=fuzz_team["manage"],
        examples=MANAGEMENT_EXAMPLES,
        checks=[not_a_server_error],
        tweak=_management_cases(known),
    )
    _stop_fuzz_jobs(stack, fuzz_team["manage"])
    print(statuses)
    assert not failures, "\n\n".join(failures)
    with stack.client(fuzz_team["manage"]) as api:  # moved, not deleted: still on versions of their model
        left = [d for d in api.get("/api/v1/deployments").json() if d["name"] in known["name"]]
    assert all(d["model_version"].startswith(d["name"] + ":") for d in left), left
