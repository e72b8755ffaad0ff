"""The permission matrix, cell by cell, and every route against an outsider.

`accounts.permissions.PERMISSIONS` is the one definition: for each action in it and each role, the
role's member tries the action through the management API and is allowed (2xx) or refused (403)
exactly as the matrix says. Every API route and every HTML URL pattern is classified below; a
route nobody classified fails `test_every_*_route_is_classified`, so a new route cannot skip this.
"""

from __future__ import annotations

import re

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client, override_settings
from django.urls import URLPattern, URLResolver

from accounts.models import ApiKey, Membership, Role, Team
from accounts.permissions import PERMISSIONS, role_allows
from console import urls as console_urls
from console.api import api
from evalsets.models import Dataset
from inference.models import Deployment, Job, ModelVersion
from tests.support import people
from tests.support.tiny_models import COLOURS, colour_classifier

pytestmark = pytest.mark.django_db
ROLES = [Role.OWNER, Role.ADMIN, Role.MEMBER, Role.VIEWER]


def _json(method):
    return lambda c, path, body=None: getattr(c, method)(path, body or {}, content_type="application/json")


post, patch = _json("post"), _json("patch")


def _upload(acme, tmp_path):
    data = colour_classifier(tmp_path / "up.onnx").read_bytes()
    body = {"name": "uploaded", "task": "image-classification", "labels": "\n".join(COLOURS)}
    return acme.client.post(
        "/api/v1/models", {**body, "file": SimpleUploadedFile("m.onnx", data)}, format="multipart"
    )


# action -> how the acting member tries it (client, the Acme world, tmp_path) -> response
ATTEMPTS = {
    "team.delete": lambda a, t: (
        Deployment.objects.filter(team=a.team).delete(),
        a.client.delete("/api/v1/team"),
    )[1],
    "member.read": lambda a, t: a.client.get("/api/v1/team/members"),
    "member.invite": lambda a, t: post(a.client, "/api/v1/team/invitations", {"role": "viewer"}),
    "member.role_change": lambda a, t: patch(a.client, "/api/v1/team/members/sam", {"role": "viewer"}),
    "member.remove": lambda a, t: a.client.delete("/api/v1/team/members/sam"),
    "owner.manage": lambda a, t: patch(a.client, "/api/v1/team/members/sam", {"role": "owner"}),
    "invitation.read": lambda a, t: a.client.get("/api/v1/team/invitations"),
    "invitation.revoke": lambda a, t: a.client.delete(f"/api/v1/team/invitations/{a.invitation.pk}"),
    "audit.read": lambda a, t: a.client.get("/api/v1/audit"),
    "model.read": lambda a, t: a.client.get("/api/v1/models/colours"),
    "model.upload": _upload,
    "model.delete": lambda a, t: a.client.delete(f"/api/v1/models/versions/{a.spare.pk}"),
    "job.read": lambda a, t: a.client.get(f"/api/v1/jobs/{a.queued_job.pk}/log"),
    "job.start": lambda a, t: post(
        a.client, "/api/v1/jobs", {"version_id": a.deployed.pk, "kind": "quantize_int8"}
    ),
    "job.cancel": lambda a, t: a.client.post(f"/api/v1/jobs/{a.queued_job.pk}/cancel"),
    "job.retry": lambda a, t: a.client.post(f"/api/v1/jobs/{a.failed_job.pk}/retry"),
    "deployment.read": lambda a, t: a.client.get("/api/v1/deployments/colours"),
    "deployment.create": lambda a, t: post(
        a.client, "/api/v1/deployments", {"name": "second", "model_version_id": a.deployed.pk}
    ),
    "deployment.update": lambda a, t: patch(a.client, "/api/v1/deployments/colours", {"replicas": 2}),
    "deployment.delete": lambda a, t: a.client.delete("/api/v1/deployments/colours"),
    "key.read": lambda a, t: a.client.get("/api/v1/keys"),
    "key.create": lambda a, t: post(a.client, "/api/v1/keys", {"name": "mine"}),
    "key.update": lambda a, t: patch(a.client, f"/api/v1/keys/{a.own_key.pk}", {"name": "renamed"}),
    "key.revoke": lambda a, t: a.client.delete(f"/api/v1/keys/{a.own_key.pk}"),
    "key.manage_others": lambda a, t: a.client.delete(f"/api/v1/keys/{a.sam_key.pk}"),
    "node.read": lambda a, t: a.client.get("/api/v1/nodes"),
    "node.manage": lambda a, t: _team_node_token(a),
    "dataset.read": lambda a, t: a.client.get("/api/v1/datasets"),
    "dataset.create": lambda a, t: a.client.post(
        "/api/v1/datasets",
        {"name": "texts", "kind": "texts", "file": SimpleUploadedFile("t.jsonl", b'{"text": "hi"}\n')},
        format="multipart",
    ),
    "dataset.delete": lambda a, t: (
        Dataset.objects.create(
            team=a.team, name="spare", kind="texts", sha256="0" * 64, size_bytes=1, item_count=1
        ),
        a.client.delete("/api/v1/datasets/spare"),
    )[1],
}


def _team_node_token(acme):
    """``node.manage`` is about a team's own nodes (the shared fleet is for install administrators)."""
    with override_settings(TEAM_NODES=True):
        return post(acme.client, "/api/v1/nodes/join-tokens", {"region": "hk", "for_team": True})


def test_every_action_of_the_matrix_has_an_attempt():
    assert set(ATTEMPTS) == set(PERMISSIONS)


@pytest.mark.parametrize("role", ROLES)
@pytest.mark.parametrize("action", sorted(PERMISSIONS))
def test_role_may_do_exactly_what_the_matrix_says(action, role, acme_factory, tmp_path):
    acme = acme_factory(role)
    response = ATTEMPTS[action](acme, tmp_path)
    if role_allows(role, action):
        assert 200 <= response.status_code < 300, (action, role, response.content[:300])
    else:
        assert response.status_code == 403, (action, role, response.content[:300])
        assert response.json()["error"]["type"] == "forbidden"


# ---- every route, classified ------------------------------------------------------------------------
SELF = "self"  # the caller's own account (their teams); no team's data
NODE_AGENT = "node-agent"  # node token, not people
INSTALL = "install-admin"  # the shared fleet: install administrators only, whatever the team role
API_ROUTES = {
    "GET /keys": "key.read",
    "POST /keys": "key.create",
    "DELETE /keys/{key_id}": "key.revoke",
    "PATCH /keys/{key_id}": "key.update",
    "GET /keys/{key_id}/usage": "key.read",
    "GET /team/members": "member.read",
    "PATCH /team/members/{username}": "member.role_change",
    "DELETE /team/members/{username}": "member.remove",
    "GET /team/invitations": "invitation.read",
    "POST /team/invitations": "member.invite",
    "DELETE /team/invitations/{invitation_id}": "invitation.revoke",
    "DELETE /team": "team.delete",
    "GET /teams": SELF,
    "POST /teams": SELF,
    "GET /audit": "audit.read",
    "GET /models": "model.read",
    "POST /models": "model.upload",
    "GET /models/{name}": "model.read",
    "DELETE /models/versions/{version_id}": "model.delete",
    "GET /deployments": "deployment.read",
    "POST /deployments": "deployment.create",
    "GET /deployments/{name}": "deployment.read",
    "PATCH /deployments/{name}": "deployment.update",
    "POST /deployments/{name}/rollback": "deployment.update",
    "POST /deployments/{name}/canary": "deployment.update",
    "POST /deployments/{name}/canary/promote": "deployment.update",
    "POST /deployments/{name}/canary/abort": "deployment.update",
    "PUT /deployments/{name}/autoscaling": "deployment.update",
    "DELETE /deployments/{name}": "deployment.delete",
    "GET /nodes": "node.read",
    "GET /nodes/{name}": "node.read",
    "POST /nodes/join-tokens": "node.manage",
    "POST /nodes/{name}/cordon": INSTALL,  # or node.manage on the team's own node
    "POST /nodes/{name}/uncordon": INSTALL,  # or node.manage on the team's own node
    "POST /nodes/{name}/drain": INSTALL,  # or node.manage on the team's own node
    "POST /nodes/{name}/rotate": INSTALL,  # or node.manage on the team's own node
    "DELETE /nodes/{name}": INSTALL,
    "GET /fleet/pools": "node.read",
    "POST /fleet/pools": INSTALL,
    "DELETE /fleet/pools/{pool}": INSTALL,
    "GET /fleet/grant": "node.read",  # the current team's
    "GET /fleet/grants": INSTALL,
    "PUT /fleet/grants/{team_id}": INSTALL,
    "GET /regions": "node.read",  # every member and key sees where the fleet runs
    "POST /regions": INSTALL,
    "PATCH /regions/{name}": INSTALL,
    "DELETE /regions/{name}": INSTALL,
    "POST /nodes/join": NODE_AGENT,  # the join token in the body is the credential
    "POST /nodes/credential": NODE_AGENT,
    "POST /nodes/heartbeat": NODE_AGENT,
    "GET /nodes/artifacts/{sha256}": NODE_AGENT,
    "GET /nodes/edge-config": NODE_AGENT,  # and only a node that joined with an edge token (tests/edge)
    "GET /jobs": "job.read",
    "POST /jobs": "job.start",
    "GET /jobs/{job_id}": "job.read",
    "POST /jobs/{job_id}/cancel": "job.cancel",
    "POST /jobs/{job_id}/retry": "job.retry",
    "GET /jobs/{job_id}/log": "job.read",
    "GET /datasets": "dataset.read",
    "POST /datasets": "dataset.create",
    "GET /datasets/{name}": "dataset.read",
    "DELETE /datasets/{name}": "dataset.delete",
}


def api_routes() -> list[str]:
    found = []
    for prefix, router in api._routers:
        for path, view in router.path_operations.items():
            for operation in view.operations:
                for method in operation.methods:
                    found.append(f"{method} {('/' + prefix.strip('/') + path).rstrip('/') or '/'}")
    return sorted(found)


def test_every_api_route_is_classified():
    routes = api_routes()
    assert routes, "no routes found: did NinjaAPI's internals change?"
    unclassified = [r for r in routes if r not in API_ROUTES]
    assert not unclassified, f"classify these in API_ROUTES (and PERMISSIONS): {unclassified}"
    for route, action in API_ROUTES.items():
        assert action in (SELF, NODE_AGENT, INSTALL) or action in PERMISSIONS, route


def _concrete(route: str, acme) -> tuple[str, str]:
    method, path = route.split(" ", 1)
    artifact = acme.deployed.artifacts.first()
    values = {
        "key_id": acme.sam_key.pk,
        "username": "sam",
        "invitation_id": acme.invitation.pk,
        "name": "colours",
        "version_id": acme.spare.pk,
        "job_id": acme.queued_job.pk,
        "sha256": artifact.sha256,
        "pool": "us-gpu",
        "team_id": acme.team.pk,
    }
    return method, "/api/v1" + re.sub(r"\{(\w+)\}", lambda m: str(values[m.group(1)]), path)


def _markers(acme) -> list[bytes]:
    return [b"acme", b'"sam"', acme.own_key.prefix.encode(), acme.sam_key.prefix.encode()]


def _acme_untouched(acme) -> None:
    assert Team.objects.filter(pk=acme.team.pk).exists()
    assert Membership.objects.get(team=acme.team, user__username="sam").role == Role.MEMBER
    assert Deployment.objects.get(name="colours").replicas == 1
    assert ModelVersion.objects.filter(pk=acme.spare.pk).exists()
    assert not ApiKey.objects.filter(team=acme.team, revoked_at__isnull=False).exists()
    assert Job.objects.get(pk=acme.queued_job.pk).status == "queued"
    assert acme.invitation.__class__.objects.get(pk=acme.invitation.pk).revoked_at is None


# Well-formed for every PATCH route above, so a refusal cannot hide behind a 422: each route is sent
# the fields its body takes (unknown fields are refused with 422, tests/security/test_unknown_fields.py).
# (model_version_id, percent: canaries; max_replicas: autoscaling)
VALID_BODY = {"role": "viewer", "replicas": 2, "name": "renamed", "model_version_id": 1, "percent": 10,
              "max_replicas": 2}  # fmt: skip


def _valid_body(route: str) -> dict:
    """``VALID_BODY`` cut to the fields the route's JSON body takes (all of it for routes without one)."""
    method, path = route.split(" ", 1)
    document = api.get_openapi_schema(path_prefix="/api/v1")
    operation = document["paths"].get("/api/v1" + path, {}).get(method.lower(), {})
    content = operation.get("requestBody", {}).get("content", {}).get("application/json")
    if content is None:
        return VALID_BODY
    schema = content["schema"]
    if "$ref" in schema:
        schema = document["components"]["schemas"][schema["$ref"].rsplit("/", 1)[1]]
    return {k: v for k, v in VALID_BODY.items() if k in schema.get("properties", {})}


@pytest.fixture
def oscar_client(db):
    client = Client()
    client.force_login(people.outsider())
    return client


@pytest.mark.parametrize("route", sorted(API_ROUTES))
def test_outsider_asking_for_acme_gets_no_access_and_no_data(route, acme_factory, oscar_client):
    acme = acme_factory(Role.MEMBER)
    method, path = _concrete(route, acme)
    call = getattr(oscar_client, method.lower())
    body = _valid_body(route)
    hinted = call(path, body, content_type="application/json", HTTP_X_LANTAU_TEAM=str(acme.team.pk))
    assert hinted.status_code in (401, 403, 404), (route, hinted.status_code)
    plain = call(path, body, content_type="application/json")
    if "{" in route:  # an acme object named in the path: as if it did not exist
        assert plain.status_code in (401, 403, 404), (route, plain.status_code)
    for body in (hinted.content, plain.content):
        assert not any(marker in body for marker in _markers(acme)), (route, body[:300])
    _acme_untouched(acme)


def test_outsider_cannot_use_acme_objects_named_in_a_body(acme_factory, oscar_client):
    acme = acme_factory(Role.MEMBER)
    r = post(oscar_client, "/api/v1/jobs", {"version_id": acme.deployed.pk, "kind": "quantize_int8"})
    assert r.status_code == 404
    r = post(oscar_client, "/api/v1/deployments", {"name": "stolen", "model_version_id": acme.deployed.pk})
    assert r.status_code == 404
    assert not Deployment.objects.filter(name="stolen").exists()
    assert Job.objects.count() == 2


PUBLIC, SIGNED_IN, TEAM_PAGE, TEAM_OBJECT = "public", "signed-in", "team page", "team object"
HTML_ROUTES = {
    "console:dashboard": SIGNED_IN,  # the caller's own team's summary, or an empty page
    "console:healthz": PUBLIC,
    "console:readyz": PUBLIC,
    "console:plotly-js": PUBLIC,
    "console:audit": TEAM_PAGE,
    "accounts:login": PUBLIC,
    "accounts:logout": PUBLIC,
    "accounts:invitation": PUBLIC,  # the token is the credential; see tests/accounts/test_invitations.py
    "accounts:password-change": SIGNED_IN,
    "accounts:team-switch": SIGNED_IN,
    "accounts:team-new": SIGNED_IN,
    "accounts:keys": TEAM_PAGE,
    "accounts:team": TEAM_PAGE,
    "accounts:team-action": TEAM_PAGE,
    "accounts:key-revoke": TEAM_OBJECT,
    "inference:model-list": TEAM_PAGE,
    "inference:deployment-list": TEAM_PAGE,
    "inference:model-detail": TEAM_OBJECT,
    "inference:job-new": TEAM_OBJECT,
    "inference:job-detail": TEAM_OBJECT,
    "inference:job-action": TEAM_OBJECT,
    "inference:job-disagreements": TEAM_OBJECT,
    "inference:deployment-detail": TEAM_OBJECT,
    "inference:deployment-action": TEAM_OBJECT,
    "inference:playground": TEAM_PAGE,
    "inference:playground-key": TEAM_PAGE,  # POST only; mints for the caller's own team
    "inference:playground-sample": SIGNED_IN,  # bundled photos, no team data
    "inference:deployment-playground": TEAM_OBJECT,
    "inference:job-list": TEAM_PAGE,
    "inference:node-list": TEAM_PAGE,  # nodes are install-wide; the page lists only the viewer's replicas
    "inference:node-join-token": TEAM_PAGE,  # POST only, node.manage
    "inference:node-detail": TEAM_OBJECT,  # install-wide node; "colours" is no node's name: 404
    "inference:node-action": TEAM_OBJECT,
    "datasets:dataset-list": TEAM_PAGE,
    "datasets:dataset-delete": TEAM_OBJECT,
}


def html_patterns(patterns=None, prefix="", namespace="") -> list[tuple[str, str]]:
    """(namespaced name, route) of every HTML URL pattern; the management API is tested above."""
    found = []
    for entry in console_urls.urlpatterns if patterns is None else patterns:
        if isinstance(entry, URLResolver):
            if entry.namespace == "api":
                continue
            ns = ":".join(n for n in (namespace, entry.namespace) if n)
            found += html_patterns(entry.url_patterns, prefix + str(entry.pattern), ns)
        elif isinstance(entry, URLPattern):
            found.append(
                (f"{namespace}:{entry.name}" if namespace else str(entry.name), prefix + str(entry.pattern))
            )
    return found


def test_every_html_route_is_classified_and_admin_is_off():
    found = html_patterns()
    unclassified = [name for name, _ in found if name not in HTML_ROUTES]
    assert not unclassified, f"classify these in HTML_ROUTES: {unclassified}"
    assert not any(route.startswith("admin/") for _, route in found)  # LANTAU_ADMIN defaults to off


def _html_path(route: str, acme) -> str:
    values = {"key_id": acme.sam_key.pk, "name": "colours", "job_id": acme.queued_job.pk, "token": "x"}
    return "/" + re.sub(r"<(?:\w+:)?(\w+)>", lambda m: str(values[m.group(1)]), route)


@pytest.mark.parametrize("name", sorted(n for n, kind in HTML_ROUTES.items() if kind != PUBLIC))
def test_outsider_gets_no_acme_page(name, acme_factory, oscar_client):
    acme = acme_factory(Role.MEMBER)
    route = dict(html_patterns())[name]
    path = _html_path(route, acme)
    hinted = oscar_client.get(path, {"team": acme.team.pk})
    if HTML_ROUTES[name] in (TEAM_PAGE, TEAM_OBJECT):
        assert hinted.status_code in (403, 404, 405), (name, hinted.status_code)
    plain_get = oscar_client.get(path)
    plain_post = oscar_client.post(path, {"action": "delete", "username": "sam"})
    if HTML_ROUTES[name] == TEAM_OBJECT:
        assert plain_get.status_code in (403, 404, 405), (name, plain_get.status_code)
    for r in (hinted, plain_get, plain_post):
        assert b"acme" not in r.content and b"colours" not in r.content, name
    _acme_untouched(acme)


@pytest.mark.parametrize("name", sorted(n for n, kind in HTML_ROUTES.items() if kind != PUBLIC))
def test_anonymous_visitor_is_sent_to_sign_in(name, acme_factory):
    acme = acme_factory(Role.MEMBER)
    path = _html_path(dict(html_patterns())[name], acme)
    r = Client().get(path)
    assert r.status_code in (302, 405) and (r.status_code == 405 or "/accounts/login/" in r["Location"]), name


def test_the_matrix_in_docs_security_md_is_the_codes():
    """docs/security.md ("People and roles") prints PERMISSIONS: a row per action, in code order."""
    from pathlib import Path

    from accounts.permissions import matrix_rows

    text = (Path(__file__).resolve().parents[2] / "docs" / "security.md").read_text()
    shown = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 5 and cells[0].startswith("`") and cells[0].endswith("`"):
            shown[cells[0].strip("`")] = [c == "yes" for c in cells[1:]]
    assert shown == dict(matrix_rows())
