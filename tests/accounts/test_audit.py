import csv
import io
import json

import pytest
from django.test import Client

from accounts.models import AuditEvent
from accounts.services import audit_record
from tests.support import people

pytestmark = pytest.mark.django_db


def test_key_creation_records_who_where_and_never_the_secret(owner_client):
    r = owner_client.post(
        "/api/v1/keys",
        {"name": "ci", "scopes": ["manage"]},
        content_type="application/json",
        REMOTE_ADDR="203.0.113.7",
    )
    clear = r.json()["key"]
    event = AuditEvent.objects.get(action="api_key.create")
    assert event.actor.username == "olivia" and event.address == "203.0.113.7"
    for row in AuditEvent.objects.all():
        assert clear not in json.dumps([row.target, row.data, row.before, row.after])
    secret_part = clear.rsplit("_", 1)[1]
    exported = owner_client.get("/api/v1/audit?format=jsonl")
    assert secret_part.encode() not in b"".join(exported.streaming_content)


def test_forwarded_address_is_believed_only_from_a_trusted_proxy(owner_client, settings):
    def create(name):
        owner_client.post(
            "/api/v1/keys",
            {"name": name},
            content_type="application/json",
            REMOTE_ADDR="10.0.0.2",
            HTTP_X_FORWARDED_FOR="198.51.100.9",
        )
        return AuditEvent.objects.filter(action="api_key.create").first().address

    settings.TRUSTED_PROXIES = []
    assert create("a") == "10.0.0.2"
    settings.TRUSTED_PROXIES = ["10.0.0.0/8"]
    assert create("b") == "198.51.100.9"


def test_audit_api_filters_pages_and_exports(owner_client, owner, team):
    for i in range(3):
        audit_record(
            team=team,
            actor=owner,
            action="deployment.update",
            target=f"d{i}",
            before={"replicas": i},
            after={"replicas": i + 1},
        )
    audit_record(team=team, actor=None, action="member.remove", target="=cmd()")
    page = owner_client.get("/api/v1/audit?action=deployment.update&limit=2").json()
    assert page["count"] == 3 and len(page["items"]) == 2
    assert page["items"][0]["before"] == {"replicas": 2} and page["items"][0]["actor"] == "olivia"
    assert owner_client.get("/api/v1/audit?action=member.").json()["count"] == 1
    assert owner_client.get("/api/v1/audit?actor=olivia&target=d1").json()["count"] == 1
    assert owner_client.get("/api/v1/audit?since=2999-01-01T00:00:00Z").json()["count"] == 0
    r = owner_client.get("/api/v1/audit?format=csv")
    assert r["Content-Type"].startswith("text/csv")
    rows = list(csv.DictReader(io.StringIO(b"".join(r.streaming_content).decode())))
    assert len(rows) == 4 and {row["target"] for row in rows} >= {"d0", "'=cmd()"}  # no formula injection
    lines = b"".join(owner_client.get("/api/v1/audit?format=jsonl").streaming_content).splitlines()
    assert len(lines) == 4 and json.loads(lines[-1])["after"] == {"replicas": 1}
    assert owner_client.get("/api/v1/audit?format=xml").status_code == 422


def test_audit_is_for_owners_and_admins_only(team, owner, teammate, viewer):
    for person in (teammate, viewer):
        c = Client()
        c.force_login(person)
        assert c.get("/api/v1/audit").status_code == 403
        assert c.get("/audit/").status_code == 403
    admin = people.person("ada", "acme", "admin")
    c = Client()
    c.force_login(admin)
    assert c.get("/api/v1/audit").status_code == 200


def test_audit_page_filters_and_links_exports(owner_client, owner, team):
    audit_record(team=team, actor=owner, action="deployment.delete", target="old-one")
    audit_record(team=team, actor=owner, action="job.cancel", target="job 9")
    page = owner_client.get("/audit/?action=deployment.delete")
    assert page.status_code == 200 and b"old-one" in page.content and b"job 9" not in page.content
    assert b"action=deployment.delete&amp;format=csv" in page.content
    export = owner_client.get("/audit/?action=job.cancel&format=jsonl")
    assert [json.loads(x)["target"] for x in b"".join(export.streaming_content).splitlines()] == ["job 9"]
