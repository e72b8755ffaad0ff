"""Unknown fields are refused (422 naming the field), never silently ignored.

The walk below reads the management API's own OpenAPI document, so an operation added later that
takes a body is covered without being listed here: every JSON body and every multipart form gets a
field no operation has, sent by a caller allowed to reach the operation, and must be answered 422 with
a message naming it. The tests after it pin what a silent ignore used to cost: a misspelt field left
the object unchanged while the caller got a 200.
"""

from __future__ import annotations

import re

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client

from console.api import api
from inference.services.nodes import node_token_create

UNKNOWN = "zz_not_a_field"
_WRITES = ("post", "put", "patch")


def _operations() -> list[tuple[str, str, dict]]:
    document = api.get_openapi_schema(path_prefix="/api/v1")
    found = []
    for path, item in document["paths"].items():
        for method, operation in item.items():
            if method in _WRITES and "requestBody" in operation:
                found.append((path, method, operation))
    return found


def _fill(path: str, team_id: int) -> str:
    """Path parameters: ids of the caller's team where one is needed, names that need not exist (the
    body is checked before the object is looked up)."""
    return re.sub(r"\{(\w+)\}", lambda m: str(team_id) if m.group(1).endswith("_id") else "x", path)


def _multipart(schema: dict) -> dict:
    form: dict = {}
    for name, prop in schema.get("properties", {}).items():
        if name not in schema.get("required", []):
            continue
        binary = prop.get("format") == "binary" or prop.get("items", {}).get("format") == "binary"
        form[name] = SimpleUploadedFile("f.bin", b"\x00" * 16) if binary else "x"
    return form


def test_the_walk_covers_every_kind_of_body():
    """The walk sees JSON bodies and multipart forms, including those read by the view (fleet)."""
    kinds = {next(iter(op["requestBody"]["content"])) for _, _, op in _operations()}
    assert {"application/json", "multipart/form-data"} <= kinds
    paths = {path for path, _, _ in _operations()}
    for expected in ("/api/v1/deployments", "/api/v1/fleet/pools", "/api/v1/models", "/api/v1/keys",
                     "/api/v1/nodes/heartbeat", "/api/v1/nodes/join"):  # fmt: skip
        assert expected in paths


@pytest.mark.django_db
def test_every_operation_refuses_an_unknown_field(install_admin, team):
    client = Client()
    client.force_login(install_admin)
    node_token = node_token_create(name="hk-walk", region="hk")[1]
    answered = []
    for path, method, operation in _operations():
        url = _fill(path, team.pk)
        content = operation["requestBody"]["content"]
        headers = {"HTTP_AUTHORIZATION": f"Bearer {node_token}"} if path.endswith("/heartbeat") else {}
        send = getattr(client, method)
        if "application/json" in content:
            r = send(url, {UNKNOWN: 1}, content_type="application/json", **headers)
        else:
            schema = content["multipart/form-data"]["schema"]
            form = _multipart(schema) | {UNKNOWN: "1"}
            if method == "post":
                r = client.post(url, form, **headers)
            else:  # the test client encodes multipart for POST only
                pytest.fail(f"{method} {path}: a multipart {method} needs its own encoding here")
        body = r.json()
        assert r.status_code == 422, (method, path, r.status_code, body)
        assert body["error"]["type"] == "validation_error", (method, path, body)
        assert UNKNOWN in body["error"]["message"], (method, path, body)
        answered.append(path)
    assert len(answered) >= 15  # the walk really ran over the API's writes


@pytest.mark.django_db
def test_a_misspelt_field_changes_nothing(owner_client: Client, owner, team, tmp_path):
    from tests.security.test_fuzz_api import _upload
    from tests.support.tiny_models import colour_classifier

    version = _upload(team, owner, colour_classifier(tmp_path / "c.onnx"), "colours")
    created = owner_client.post(
        "/api/v1/deployments",
        {"name": "colours", "model_version_id": version.pk, "replicas": 1},
        content_type="application/json",
    )
    assert created.status_code == 201, created.content
    r = owner_client.patch("/api/v1/deployments/colours", {"replica": 3}, content_type="application/json")
    assert r.status_code == 422
    assert r.json()["error"]["message"] == "unknown field 'replica': this request does not take it"
    assert owner_client.get("/api/v1/deployments/colours").json()["replicas"] == 1


@pytest.mark.django_db
def test_a_nested_unknown_field_is_named_with_its_place():
    token = node_token_create(name="hk-nested", region="hk")[1]
    r = Client().post(
        "/api/v1/nodes/heartbeat",
        {"region": "hk", "replicas": [{"id": 1, "state": "ready", "colour": "red"}]},
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {token}",
    )
    assert r.status_code == 422
    assert r.json()["error"]["message"] == "unknown field 'replicas.0.colour': this request does not take it"


@pytest.mark.django_db
def test_an_unknown_upload_field_is_refused_before_anything_is_stored(owner_client: Client, tmp_path):
    from inference.models import RegisteredModel
    from tests.support.tiny_models import colour_classifier

    path = colour_classifier(tmp_path / "c.onnx")
    with path.open("rb") as f:
        r = owner_client.post("/api/v1/models", {"name": "colours", "file": f, "lables": "red\ngreen"})
    assert r.status_code == 422
    message = r.json()["error"]["message"]
    assert message.startswith("unknown field 'lables': this request takes ")
    assert "labels" in message
    assert not RegisteredModel.objects.exists()


def test_the_published_schemas_say_so():
    """Clients generated from the document know too: request bodies forbid additional properties."""
    schemas = api.get_openapi_schema(path_prefix="/api/v1")["components"]["schemas"]
    for name in ("DeploymentIn", "DeploymentPatch", "ApiKeyIn", "JobIn", "HeartbeatIn", "ReplicaReport"):
        assert schemas[name].get("additionalProperties") is False, name
