"""Review H-A: any signed-in user could create a team and, as its owner, run the whole shared fleet:
join tokens (edge ones too), cordon, drain, remove, and a rogue node that received other teams' replicas.

Now the shared fleet belongs to install administrators (``accounts.install_admin``). A team may bring
nodes of its own only where the install allows it (``LANTAU_TEAM_NODES``), and such a node serves that
team alone. What a team may use of the shared fleet is granted to it (node pools, caps), and placement
says "not granted to team X" for the rest. Review L-I: fleet actions show in the affected teams' logs.
"""

from __future__ import annotations

import pytest
from django.test import Client

from accounts.install_admin import NOT_ADMIN
from accounts.models import AuditEvent
from inference.models import Deployment, FleetGrant, Node, NodePool, Replica
from inference.services.deployments import deployment_reconcile
from tests.support import hardware, people

pytestmark = pytest.mark.django_db

BEAT = {"region": "hk", "inventory": {"cpus": 64, "memory_bytes": 2**38, "advertise_host": "127.0.0.1",
                                      "providers": ["CPUExecutionProvider"]}, "replicas": []}  # fmt: skip


def as_user(user, team_id: int | None = None) -> Client:
    client = Client(HTTP_X_LANTAU_TEAM=str(team_id)) if team_id else Client()
    client.force_login(user)
    return client


def send(client: Client, method: str, path: str, body: dict | None = None):
    return getattr(client, method)(path, body or {}, content_type="application/json")


def deploy(client: Client, version, **spec) -> int:
    r = send(
        client, "post", "/api/v1/deployments", {"name": "colours", "model_version_id": version.pk, **spec}
    )
    assert r.status_code == 201, r.content
    deployment_reconcile(r.json()["id"])
    return r.json()["id"]


def join_and_beat(token: str, name: str) -> str:
    """A node agent's first steps: trade the join token, then heartbeat with a big, empty inventory."""
    joined = send(Client(), "post", "/api/v1/nodes/join", {"join_token": token, "name": name, "region": "hk"})
    assert joined.status_code == 201, joined.content
    credential = joined.json()["node_token"]
    beat = Client().post("/api/v1/nodes/heartbeat", BEAT, content_type="application/json",
                         HTTP_AUTHORIZATION=f"Bearer {credential}")  # fmt: skip
    assert beat.status_code == 200, beat.content
    return credential


@pytest.fixture
def node_hk_offline(db):
    return hardware.node_hk_offline()


@pytest.fixture
def victim(owner, team, colour_version, node_hk_cpu):
    """Team acme's deployment on the shared node hk-cpu-1."""
    deploy(as_user(owner), colour_version)
    assert Replica.objects.get().node.name == "hk-cpu-1"
    return node_hk_cpu


@pytest.fixture
def rogue_owner(viewer):
    """Vera, a viewer of acme, who creates a team of her own and so becomes its owner (H-A's step 2)."""
    made = send(as_user(viewer), "post", "/api/v1/teams", {"name": "probe-team"})
    assert made.status_code == 201 and made.json()["role"] == "owner", made.content
    return as_user(viewer, made.json()["id"])


def test_h_a_the_owner_of_a_team_an_ordinary_user_made_gets_403_on_every_fleet_action(victim, rogue_owner):
    attempts = [
        ("post", "/api/v1/nodes/join-tokens", {"region": "hk"}),
        ("post", "/api/v1/nodes/join-tokens", {"region": "hk", "labels": {"lantau.io/edge": "true"}}),
        ("post", "/api/v1/nodes/join-tokens", {"region": "hk", "for_team": True}),  # LANTAU_TEAM_NODES off
        ("post", "/api/v1/nodes/hk-cpu-1/cordon", None),
        ("post", "/api/v1/nodes/hk-cpu-1/drain", None),
        ("post", "/api/v1/nodes/hk-cpu-1/uncordon", None),
        ("post", "/api/v1/nodes/hk-cpu-1/rotate", None),
        ("delete", "/api/v1/nodes/hk-cpu-1", None),
        ("post", "/api/v1/fleet/pools", {"name": "mine", "selector": {"zone": "a"}}),
        ("get", "/api/v1/fleet/grants", None),
        ("put", f"/api/v1/fleet/grants/{victim.pk}", {"pools": []}),
    ]
    for method, path, body in attempts:
        r = send(rogue_owner, method, path, body)
        assert r.status_code == 403, (path, body, r.content)
        assert r.json()["error"]["type"] == "forbidden"
    # The HTML forms behind the node pages' buttons likewise.
    for action in ("cordon", "drain", "remove"):
        assert rogue_owner.post("/nodes/hk-cpu-1/action", {"action": action}).status_code == 403
    assert rogue_owner.post("/nodes/join-token", {"region": "hk"}).status_code == 403
    node = Node.objects.get(name="hk-cpu-1")
    assert node.mode == "active" and not node.rotate_requested and Replica.objects.count() == 1
    assert not AuditEvent.objects.filter(action__startswith="node.").exists()


def test_h_a_the_403_names_what_is_needed(rogue_owner, victim):
    r = send(rogue_owner, "post", "/api/v1/nodes/hk-cpu-1/drain")
    assert r.json()["error"]["message"] == NOT_ADMIN


def test_h_a_an_install_administrator_runs_the_fleet(victim, owner, install_admin):
    admin = as_user(install_admin)
    made = send(admin, "post", "/api/v1/nodes/join-tokens", {"region": "hk"})
    assert made.status_code == 201
    assert send(admin, "post", "/api/v1/nodes/hk-cpu-1/cordon").json()["mode"] == "cordoned"
    assert send(admin, "post", "/api/v1/nodes/hk-cpu-1/uncordon").json()["mode"] == "active"


def test_h_a_install_admin_command_and_team_page_grant(owner, teammate, capsys):
    from django.core.management import call_command

    call_command("install_admin", "--grant", "olivia")
    owner.refresh_from_db()
    assert owner.is_staff
    call_command("install_admin", "--list")
    assert "olivia" in capsys.readouterr().out
    # Another administrator grants it on the team page; a non-administrator cannot.
    page = as_user(owner)
    assert (
        page.post(
            "/accounts/team/action", {"action": "install_admin", "username": "tom", "value": "1"}
        ).status_code
        == 302
    )
    teammate.refresh_from_db()
    assert teammate.is_staff
    tom = as_user(teammate)
    call_command("install_admin", "--revoke", "olivia")
    r = tom.post(
        "/accounts/team/action", {"action": "install_admin", "username": "tom", "value": "0"}, follow=True
    )
    assert b"cannot take the install administrator flag from yourself" in r.content
    assert AuditEvent.objects.filter(action="install.admin_grant", target="tom", team__name="acme").exists()


def test_h_a_a_teams_own_node_never_receives_another_teams_replica(settings, owner, team, colour_version,
                                                                  outsider):  # fmt: skip
    settings.TEAM_NODES = True
    globex = outsider.memberships.get().team
    made = send(as_user(outsider), "post", "/api/v1/nodes/join-tokens", {"region": "hk", "for_team": True})
    assert made.status_code == 201, made.content
    join_and_beat(made.json()["join_token"], "globex-box")
    assert Node.objects.get(name="globex-box").team == globex
    # The only ready node with room is globex's own: acme's deployment stays unplaced, and acme is not
    # even told the node exists.
    d = deploy(as_user(owner), colour_version)
    assert not Replica.objects.filter(deployment_id=d).exists()
    placement = as_user(owner).get("/api/v1/deployments/colours").json()["placement"]
    assert placement["unplaced"] == 1 and "globex-box" not in str(placement)
    assert "globex-box" not in {n["name"] for n in as_user(owner).get("/api/v1/nodes").json()}
    assert as_user(owner).get("/api/v1/nodes/globex-box").status_code == 404
    assert as_user(owner).get("/nodes/globex-box/").status_code == 404
    # Globex's owner may cordon its own node; an edge token for a team's node is refused.
    assert send(as_user(outsider), "post", "/api/v1/nodes/globex-box/cordon").json()["mode"] == "cordoned"
    edge = send(as_user(outsider), "post", "/api/v1/nodes/join-tokens",
                {"region": "hk", "for_team": True, "labels": {"lantau.io/edge": "true"}})  # fmt: skip
    assert edge.status_code == 403
    assert AuditEvent.objects.filter(action="node.cordoned", team=globex).exists()


def test_h_a_a_team_token_cannot_take_over_a_shared_node_by_its_name(settings, outsider, node_hk_offline):
    settings.TEAM_NODES = True
    made = send(as_user(outsider), "post", "/api/v1/nodes/join-tokens", {"region": "hk", "for_team": True})
    r = send(Client(), "post", "/api/v1/nodes/join",
             {"join_token": made.json()["join_token"], "name": "hk-cpu-down", "region": "hk"})  # fmt: skip
    assert r.status_code == 409 and Node.objects.get(name="hk-cpu-down").team is None


def test_h_a_a_team_granted_only_us_gpu_is_never_placed_elsewhere(owner, team, colour_version, install_admin):
    hardware.node("hk-cpu-1", "hk")
    hardware.node("us-cpu-1", "us", labels={"pool": "general"})
    hardware.node("us-gpu-1", "us", gpus=[hardware.H200], labels={"pool": "gpu"})
    admin = as_user(install_admin)
    assert (
        send(
            admin, "post", "/api/v1/fleet/pools", {"name": "us-gpu", "selector": {"pool": "gpu"}}
        ).status_code
        == 201
    )
    put = send(admin, "put", f"/api/v1/fleet/grants/{team.pk}", {"pools": ["us-gpu"]})
    assert put.status_code == 200 and put.json()["pools"] == ["us-gpu"]
    deploy(admin, colour_version, replicas=3, region="us")
    placed = set(Replica.objects.values_list("node__name", flat=True))
    assert placed == {"us-gpu-1"}
    # hk-cpu-1 and us-cpu-1 were refused for the grant: the reasons say so (placement answers them all).
    Replica.objects.all().delete()
    Node.objects.filter(name="us-gpu-1").update(mode="cordoned")
    deployment_reconcile(Deployment.objects.get().pk)
    reasons = as_user(owner).get("/api/v1/deployments/colours").json()["placement"]["reasons"]
    assert "us-cpu-1: not granted to team acme (its pools: us-gpu)" in reasons, reasons
    assert any(r.startswith("us-gpu-1: cordoned") for r in reasons), reasons
    assert as_user(owner).get("/api/v1/fleet/grant").json()["pools"] == ["us-gpu"]


def test_h_a_caps_hold_across_a_teams_deployments(owner, team, colour_version, install_admin, node_hk_cpu):
    FleetGrant.objects.create(team=team, max_replicas=2)
    deploy(as_user(owner), colour_version, replicas=3)
    assert Replica.objects.count() == 2
    reasons = as_user(owner).get("/api/v1/deployments/colours").json()["placement"]["reasons"]
    assert reasons == ["hk-cpu-1: team acme is at its cap of 2 replicas"], reasons


def test_h_a_a_pool_of_named_nodes(install_admin, node_hk_cpu):
    admin = as_user(install_admin)
    made = send(admin, "post", "/api/v1/fleet/pools", {"name": "pinned", "nodes": ["hk-cpu-1"]})
    assert made.status_code == 201 and NodePool.objects.get().holds(node_hk_cpu)
    for bad, message in (({"name": "x"}, "needs a selector"), ({"name": "Bad Name", "nodes": ["a"]}, "name must"),
                         ({"name": "y", "nodes": ["../x"]}, "is not a node name"),
                         ({"name": "pinned", "nodes": ["a"]}, "already called")):  # fmt: skip
        r = send(admin, "post", "/api/v1/fleet/pools", bad)
        assert r.status_code in (409, 422) and message in r.json()["error"]["message"], (bad, r.content)
    assert (
        send(admin, "post", "/api/v1/fleet/pools", {"name": "z", "nodes": [], "extra": 1}).status_code == 422
    )


def test_l_i_a_drain_shows_in_the_affected_teams_audit_log(victim, owner, install_admin, outsider):
    """Review L-I: install-wide node actions were recorded with no team; now the teams whose replicas
    the node runs, and the actor's teams, see them (and the install log keeps its own copy)."""
    ops = people.person("ops", "ops-team", "owner")
    ops.is_staff = True  # an install administrator who is in no team of acme's
    ops.save()
    assert send(as_user(ops), "post", "/api/v1/nodes/hk-cpu-1/drain").status_code == 200
    acme_log = as_user(owner).get("/api/v1/audit?action=node.").json()
    assert [e["action"] for e in acme_log["items"]] == ["node.draining"], acme_log
    assert acme_log["items"][0]["actor"] == "ops"
    ops_log = as_user(ops).get("/api/v1/audit?action=node.").json()
    assert [e["action"] for e in ops_log["items"]] == ["node.draining"]
    globex_log = as_user(outsider).get("/api/v1/audit?action=node.").json()
    assert globex_log["items"] == []  # not involved
    assert AuditEvent.objects.filter(action="node.draining", team__isnull=True).count() == 1
