"""Regions as data (issue 19): install administrators add, change and remove them; nodes join them and
deployments ask for them; every check reads the regions table, so Singapore needs no code change."""

import threading
import time

import pytest
from django.core.management import CommandError, call_command
from django.db import connection, transaction
from django.test import Client

from accounts.install_admin import NOT_ADMIN
from accounts.models import AuditEvent
from accounts.services import api_key_create
from core.errors import ApplicationError
from inference.agent.main import build_parser
from inference.models import Deployment, JoinToken, Node, Region, Replica
from inference.services.deployments import deployment_reconcile
from inference.services.regions import region_delete, region_require
from tests.support import hardware

pytestmark = pytest.mark.django_db

BEAT = {"inventory": {"cpus": 8, "memory_bytes": 2**34, "advertise_host": "127.0.0.1",
                      "providers": ["CPUExecutionProvider"]}, "replicas": []}  # fmt: skip


def send(client: Client, method: str, path: str, body: dict | None = None):
    return getattr(client, method)(path, body or {}, content_type="application/json")


def as_user(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def error(r) -> str:
    return r.json()["error"]["message"]


def add_region(client: Client, name: str, display_name: str, **more) -> dict:
    r = send(client, "post", "/api/v1/regions", {"name": name, "display_name": display_name, **more})
    assert r.status_code == 201, r.content
    return r.json()


def join_and_beat(token: str, name: str, region: str) -> None:
    """A node agent's first steps through the real API: trade the join token, then heartbeat."""
    joined = send(Client(), "post", "/api/v1/nodes/join",
                  {"join_token": token, "name": name, "region": region})  # fmt: skip
    assert joined.status_code == 201, joined.content
    beat = Client().post("/api/v1/nodes/heartbeat", {"region": region, **BEAT}, content_type="application/json",
                         HTTP_AUTHORIZATION=f"Bearer {joined.json()['node_token']}")  # fmt: skip
    assert beat.status_code == 200, beat.content


def test_the_seeded_regions_are_listed_to_any_member_and_key_in_failover_order(teammate, team, owner):
    listed = send(as_user(teammate), "get", "/api/v1/regions").json()
    assert [(r["name"], r["display_name"], r["failover_order"]) for r in listed] == [
        ("hk", "Hong Kong", 0),
        ("us", "United States", 1),
    ]
    _, key = api_key_create(team=team, actor=owner, name="k", scopes=["manage"])
    by_key = Client().get("/api/v1/regions", HTTP_AUTHORIZATION=f"Bearer {key}")
    assert by_key.status_code == 200 and [r["name"] for r in by_key.json()] == ["hk", "us"]
    assert Client().get("/api/v1/regions").status_code == 401


def test_an_admin_adds_singapore_a_node_joins_it_and_a_deployment_runs_there(install_admin, colour_version):
    admin = as_user(install_admin)
    made = add_region(admin, "sg", "Singapore")
    assert made["failover_order"] == 2  # after every region when not given
    token = send(admin, "post", "/api/v1/nodes/join-tokens", {"region": "sg"})
    assert token.status_code == 201, token.content
    join_and_beat(token.json()["join_token"], "sg-cpu-1", "sg")
    assert Node.objects.get(name="sg-cpu-1").region == "sg"
    hardware.node_hk_cpu()  # another region's node with room: the deployment still goes to sg
    created = send(admin, "post", "/api/v1/deployments",
                   {"name": "colours", "model_version_id": colour_version.pk, "region": "sg", "replicas": 2})  # fmt: skip
    assert created.status_code == 201, created.content
    assert deployment_reconcile(created.json()["id"])["placed"] == 2
    assert sorted(Replica.objects.values_list("node__name", flat=True)) == ["sg-cpu-1", "sg-cpu-1"]
    shown = send(admin, "get", "/api/v1/deployments/colours").json()
    assert shown["region"] == "sg" and shown["placement"]["in_preferred_region"] is True
    audit = AuditEvent.objects.get(action="fleet.region_create", team__isnull=True)
    assert audit.target == "sg" and audit.after == {"display_name": "Singapore", "failover_order": 2}


def test_a_join_for_a_region_not_in_the_table_names_the_known_ones(install_admin, team):
    admin = as_user(install_admin)
    refused = send(admin, "post", "/api/v1/nodes/join-tokens", {"region": "sg"})
    assert refused.status_code == 422 and error(refused) == "region must be one of hk, us"
    add_region(admin, "sg", "Singapore")
    token = send(admin, "post", "/api/v1/nodes/join-tokens", {"region": "sg"}).json()["join_token"]
    send(admin, "delete", "/api/v1/regions/sg")  # unused, so removed; the token's join then fails
    joined = send(
        Client(), "post", "/api/v1/nodes/join", {"join_token": token, "name": "sg-1", "region": "sg"}
    )
    assert joined.status_code == 422 and error(joined) == "region must be one of hk, us"
    assert not Node.objects.exists() and JoinToken.objects.get().used_at is None


def test_a_team_owner_who_is_no_install_admin_gets_403_and_changes_nothing(owner):
    owner_client = as_user(owner)  # owns team acme, not the install
    attempts = [
        ("post", "/api/v1/regions", {"name": "sg", "display_name": "Singapore"}),
        ("post", "/api/v1/regions", {"name": "sg", "display_name": "Singapore", "colour": "red"}),
        ("patch", "/api/v1/regions/hk", {"display_name": "Mine"}),
        ("delete", "/api/v1/regions/us", None),
    ]
    for method, path, body in attempts:
        r = send(owner_client, method, path, body)
        assert r.status_code == 403 and error(r) == NOT_ADMIN, (path, r.content)
    assert list(Region.objects.values_list("name", "display_name")) == [
        ("hk", "Hong Kong"),
        ("us", "United States"),
    ]
    assert not AuditEvent.objects.filter(action__startswith="fleet.region").exists()


@pytest.mark.parametrize(
    "method, path, body, message",
    [
        (
            "post",
            "/api/v1/regions",
            {"name": "sg", "display_name": "Singapore", "zone": "a"},
            "unknown field 'zone'",
        ),
        ("patch", "/api/v1/regions/hk", {"name": "hongkong"}, "unknown field 'name'"),
        (
            "post",
            "/api/v1/regions",
            {"name": "Sing Apore", "display_name": "Singapore"},
            "name: a region's name",
        ),
        ("post", "/api/v1/regions", {"name": "-sg", "display_name": "Singapore"}, "name: a region's name"),
        ("post", "/api/v1/regions", {"name": "s" * 33, "display_name": "Singapore"}, "name: a region's name"),
        ("post", "/api/v1/regions", {"name": "sg\n", "display_name": "Singapore"}, "name: a region's name"),
        ("post", "/api/v1/regions", {"name": "sg", "display_name": "  "}, "display_name must be"),
        ("patch", "/api/v1/regions/hk", {"failover_order": 10**9}, "failover_order must be"),
    ],
)
def test_unknown_fields_and_bad_values_are_422_with_the_field_named(
    install_admin, method, path, body, message
):
    r = send(as_user(install_admin), method, path, body)
    assert r.status_code == 422 and error(r).startswith(message), r.content
    assert list(Region.objects.values_list("name", "display_name", "failover_order")) == [
        ("hk", "Hong Kong", 0),
        ("us", "United States", 1),
    ]


def test_a_taken_name_is_409_and_an_unknown_region_404(install_admin):
    admin = as_user(install_admin)
    taken = send(admin, "post", "/api/v1/regions", {"name": "hk", "display_name": "Again"})
    assert taken.status_code == 409 and error(taken) == "a region is already called 'hk'"
    assert send(admin, "patch", "/api/v1/regions/sg", {"display_name": "S"}).status_code == 404
    assert send(admin, "delete", "/api/v1/regions/sg").status_code == 404


def test_a_region_in_use_by_a_node_or_a_deployment_is_not_removed(install_admin, colour_version):
    admin = as_user(install_admin)
    add_region(admin, "sg", "Singapore")
    add_region(admin, "fra", "Frankfurt")
    hardware.node("sg-cpu-1", "sg")
    r = send(admin, "delete", "/api/v1/regions/sg")
    assert r.status_code == 409 and error(r) == "region 'sg' is in use by 1 node: move or remove them first"
    created = send(admin, "post", "/api/v1/deployments",
                   {"name": "colours", "model_version_id": colour_version.pk, "region": "fra"})  # fmt: skip
    assert created.status_code == 201, created.content
    r = send(admin, "delete", "/api/v1/regions/fra")
    assert r.status_code == 409 and "in use by 1 deployment" in error(r)
    assert set(Region.objects.values_list("name", flat=True)) == {"hk", "us", "sg", "fra"}
    Deployment.objects.filter(name="colours").delete()
    assert send(admin, "delete", "/api/v1/regions/fra").status_code == 204
    audit = AuditEvent.objects.get(action="fleet.region_delete", team__isnull=True)
    assert audit.target == "fra" and audit.before == {"display_name": "Frankfurt", "failover_order": 3}
    refused = send(admin, "post", "/api/v1/deployments",
                   {"name": "again", "model_version_id": colour_version.pk, "region": "fra"})  # fmt: skip
    assert refused.status_code == 422 and error(refused) == "region must be one of hk, us, sg"


def test_failover_order_orders_listings_and_placements_fall_back_in_it(install_admin, colour_version):
    admin = as_user(install_admin)
    add_region(admin, "sg", "Singapore", failover_order=5)
    add_region(admin, "fra", "Frankfurt", failover_order=3)
    listed = send(admin, "get", "/api/v1/regions").json()
    assert [r["name"] for r in listed] == ["hk", "us", "fra", "sg"]
    changed = send(admin, "patch", "/api/v1/regions/sg", {"failover_order": -1})
    assert changed.status_code == 200 and changed.json()["display_name"] == "Singapore"
    assert [r["name"] for r in send(admin, "get", "/api/v1/regions").json()] == ["sg", "hk", "us", "fra"]
    audit = AuditEvent.objects.get(action="fleet.region_update", team__isnull=True)
    assert audit.before["failover_order"] == 5 and audit.after["failover_order"] == -1
    # A deployment that names no region goes to the first one; with no node there it falls back to
    # the others in failover order: hk before fra (both hold an idle node).
    hardware.node("fra-cpu-1", "fra")
    hardware.node_hk_cpu()
    created = send(
        admin, "post", "/api/v1/deployments", {"name": "colours", "model_version_id": colour_version.pk}
    )
    assert created.status_code == 201 and created.json()["region"] == "sg", created.content
    deployment_reconcile(created.json()["id"])
    assert list(Replica.objects.values_list("node__name", flat=True)) == ["hk-cpu-1"]
    send(admin, "patch", "/api/v1/regions/fra", {"failover_order": -2})
    Replica.objects.all().delete()
    deployment_reconcile(created.json()["id"])
    assert list(Replica.objects.values_list("node__name", flat=True)) == ["fra-cpu-1"]


def test_the_region_command_adds_lists_and_removes(capsys, install_admin):
    call_command("region", "add", "sg", "--display-name", "Singapore")
    call_command("region", "list")
    out = capsys.readouterr().out
    assert "region sg (Singapore) added, failover order 2" in out
    assert out.splitlines()[-3:] == ["hk\t0\tHong Kong", "us\t1\tUnited States", "sg\t2\tSingapore"]
    hardware.node("sg-cpu-1", "sg")
    with pytest.raises(CommandError, match="region 'sg' is in use by 1 node"):
        call_command("region", "remove", "sg")
    Node.objects.filter(name="sg-cpu-1").delete()
    call_command("region", "remove", "sg")
    assert not Region.objects.filter(name="sg").exists()
    with pytest.raises(CommandError, match="name: a region's name is lowercase"):
        call_command("region", "add", "Bad", "--display-name", "Bad")
    assert AuditEvent.objects.filter(action="fleet.region_delete", actor__isnull=True, target="sg").exists()


def test_create_node_token_checks_the_table(capsys):
    with pytest.raises(CommandError, match="region must be one of hk, us"):
        call_command("create_node_token", "--name", "sg-1", "--region", "sg")
    Region.objects.create(name="sg", display_name="Singapore", failover_order=2)
    call_command("create_node_token", "--name", "sg-1", "--region", "sg")
    assert capsys.readouterr().out.strip().startswith("ltn_") and Node.objects.get().region == "sg"


def test_the_agent_takes_any_region_name_and_refuses_malformed_ones(capsys):
    args = build_parser().parse_args(["--console", "http://127.0.0.1:8000", "--region", "eu-central-1"])
    assert args.region == "eu-central-1"
    for bad in ("EU", "eu central", "-eu", "e" * 33):
        with pytest.raises(SystemExit):
            build_parser().parse_args(["--console", "http://127.0.0.1:8000", f"--region={bad}"])
        assert "is not a region name" in capsys.readouterr().err


def test_pages_list_the_regions_with_display_names_in_failover_order(install_admin, colour_version):
    admin = as_user(install_admin)
    add_region(admin, "sg", "Singapore", failover_order=-1)
    deployments = admin.get("/deployments/").content.decode()
    assert (
        deployments.index("Singapore") < deployments.index("Hong Kong") < deployments.index("United States")
    )
    nodes = admin.get("/nodes/").content.decode()
    assert '<option value="sg">Singapore</option>' in nodes
    overview = admin.get("/").content.decode()
    assert 'data-region="sg"' in overview and overview.index("Singapore") < overview.index("Hong Kong")


@pytest.mark.django_db(transaction=True)
def test_a_transactional_test_may_remove_the_seeded_regions():
    Region.objects.all().delete()
    assert not Region.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_the_next_transactional_test_finds_them_again_after_the_flush():
    """tests.support.regions seeds hk and us again on the post_migrate the flush sends."""
    assert list(Region.objects.values_list("name", flat=True)) == ["hk", "us"]


@pytest.mark.django_db(transaction=True)
def test_a_region_being_given_to_a_node_is_not_removed_under_it(install_admin):
    """A join holds its region's row until it commits; a removal waits for it and then sees the node."""
    Region.objects.create(name="sg", display_name="Singapore", failover_order=2)
    locked, go = threading.Event(), threading.Event()
    outcome: list[str] = []

    def joining():
        try:
            with transaction.atomic():
                region_require("sg", lock=True)
                locked.set()
                go.wait(5)
                hardware.node("sg-cpu-1", "sg")
        finally:
            connection.close()

    def removing():
        try:
            region_delete(actor=install_admin, name="sg")
            outcome.append("removed")
        except ApplicationError as exc:
            outcome.append(exc.message)
        finally:
            connection.close()

    joiner = threading.Thread(target=joining)
    joiner.start()
    assert locked.wait(5)
    remover = threading.Thread(target=removing)
    remover.start()
    time.sleep(0.3)  # the removal is now waiting on the row
    go.set()
    joiner.join(10)
    remover.join(10)
    assert outcome == ["region 'sg' is in use by 1 node: move or remove them first"]
    assert Region.objects.filter(name="sg").exists() and Node.objects.get().region == "sg"
