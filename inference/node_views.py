"""Console pages for nodes: the list, a page per node with live charts, admin actions and join tokens.

The shared fleet is install-wide (every team's replicas share it); a team's own nodes are listed to that
team alone, and a node page shows only the replicas of the viewer's team. Cordon, drain, remove and join
tokens need an install administrator (`accounts.install_admin`; a team's own nodes also its owners and
admins), checked here before the service is called and again by the service itself.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from django.conf import settings
from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import Http404
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from accounts.decorators import member_required
from accounts.install_admin import NOT_ADMIN, is_install_admin
from accounts.permissions import membership_allows
from core import once
from core.errors import ApplicationError, ValidationFailed
from core.forms import form_int
from inference import selectors
from inference.models import Node
from inference.selectors import region_choices
from inference.services import node_join
from inference.services import nodes as node_services
from inference.services.regions import region_require

NODE_ACTIONS = ("cordon", "uncordon", "drain", "remove")
ACTION_DONE = {"cordon": "cordoned, it takes no new replicas", "uncordon": "takes new replicas again",
               "drain": "draining, its replicas move once their replacements are ready",
               "remove": "removed, its replicas are being placed elsewhere"}  # fmt: skip


def _may_manage(request, membership, node: Node | None = None) -> bool:
    """Whether to show the node actions: the services check again."""
    if is_install_admin(request.user):
        return True
    own = node is not None and node.team_id == membership.team_id
    return own and settings.TEAM_NODES and membership_allows(membership, "node.manage")


def _may_bring_nodes(membership) -> bool:
    return settings.TEAM_NODES and membership_allows(membership, "node.manage")


def parse_labels(text: str) -> dict[str, str]:
    """``gpu=h200, zone=a`` (commas or new lines) as a dict; ValidationFailed names a malformed pair."""
    labels: dict[str, str] = {}
    for part in text.replace("\n", ",").split(","):
        part = part.strip()
        if not part:
            continue
        key, sep, value = part.partition("=")
        if not sep or not key.strip():
            raise ValidationFailed(f"labels are key=value pairs separated by commas; {part!r} is not one")
        labels[key.strip()] = value.strip()
    return labels


def labels_text(labels: dict | None) -> str:
    return ", ".join(f"{k}={v}" for k, v in (labels or {}).items())


def _list_page(request, membership, join: dict | None = None):
    context = {
        "nodes": list(selectors.nodes_with_load(team=membership.team)),
        "can_manage": is_install_admin(request.user),
        "can_bring": _may_bring_nodes(membership),
        "regions": region_choices(),  # the regions table, in failover order
        "join": join,  # a new join token: only in the answer to the POST that made it
        "form_nonce": once.new_nonce(),
    }
    return render(request, "inference/nodes.html", context)


@member_required
def node_list(request, membership):
    """Every node with its region, state, load and GPUs; admins also get "add a node"."""
    return _list_page(request, membership)


@member_required
def node_detail(request, membership, name: str):
    node = node_services.nodes_visible(team=membership.team).filter(name=name).first()
    if node is None:
        raise Http404("node not found")
    context = {
        "node": node,
        "labels": labels_text(node.labels),
        "inventory": selectors.node_inventory_rows(node, full=is_install_admin(request.user)),
        "replicas": selectors.node_replicas_for_team(node=node, team=membership.team),
        "slots_used": node.replicas.count(),
        "can_manage": _may_manage(request, membership, node),
    }
    return render(request, "inference/node_detail.html", context)


@member_required
@require_POST
def node_action(request, membership, name: str):
    action = request.POST.get("action", "")
    node = node_services.nodes_visible(team=membership.team).filter(name=name).first()
    if node is None:
        raise Http404("node not found")
    if not _may_manage(request, membership, node):
        raise PermissionDenied(NOT_ADMIN)
    try:
        if action not in NODE_ACTIONS:
            raise ValidationFailed(f"unknown action; choose one of {', '.join(NODE_ACTIONS)}")
        service = getattr(node_services, f"node_{action}")
        service(actor=request.user, node=node)
        messages.success(request, f"{name}: {ACTION_DONE[action]}.")
    except ApplicationError as exc:
        messages.error(request, exc.message)
    if action == "remove" and not Node.objects.filter(pk=node.pk).exists():
        return redirect("inference:node-list")
    return redirect("inference:node-detail", name=name)


@member_required
@require_POST
def node_join_token(request, membership):
    """Create a join token; the answer is the list page showing it once with the commands for a new host,
    never cached and never written to the session (review L-F). The form's one-time nonce (core.once)
    makes a reload or double submit create no second token. ``for_team``: a node of the current team
    alone. A refused form is answered with a redirect to the list and a message."""
    for_team = request.POST.get("for_team") == "1"
    if not (_may_bring_nodes(membership) if for_team else is_install_admin(request.user)):
        raise PermissionDenied(NOT_ADMIN)
    region = request.POST.get("region", "")
    try:
        region_require(region)
        labels = parse_labels(request.POST.get("labels", ""))
        ttl_s = form_int(request.POST, "ttl_s", default=3600)
        if not 60 <= ttl_s <= 7 * 86400:
            raise ValidationFailed("the token must stay valid between 1 minute and 7 days")
        _, clear = once.submit_once(request, lambda: node_join.join_token_create(
            actor=request.user, region=region, labels=labels, ttl_s=ttl_s,
            name_hint=request.POST.get("name_hint", "").strip(), team=membership.team, for_team=for_team,
        ), shown="join token")  # fmt: skip
    except ApplicationError as exc:
        messages.error(request, exc.message)
        return redirect("inference:node-list")
    console = f"{request.scheme}://{request.get_host()}"
    join = {
        "region": region,
        "ttl_s": ttl_s,
        "token": clear,
        **join_instructions(console=console, region=region, token=clear),
    }
    return once.no_store(_list_page(request, membership, join))


def join_instructions(*, console: str, region: str, token: str) -> dict[str, str]:
    """Copy-paste commands for a new host, docker and pip (docs/deployment.md, "Node agents"). The token
    goes into a 0600 file or the environment, never onto a command line (`ps` shows those). A console
    reached over plain HTTP needs the agent's ``--allow-insecure-console``, said in the commands."""
    host = urlsplit(console).hostname or ""
    insecure = console.startswith("http://") and not (host in ("localhost", "::1") or host.startswith("127."))
    warning = (
        "# the console is reached over plain HTTP: only on a private network you trust\n" if insecure else ""
    )
    docker = (
        "# on the new host (repository checkout; for GPUs: NVIDIA driver + Container Toolkit)\n"
        + warning
        + "install -m 600 /dev/null docker/node.env\n"
        f"printf 'LANTAU_JOIN_TOKEN=%s\\nLANTAU_REDIS_URL=%s\\n' '{token}' '<redis url>' > docker/node.env\n"
        + ("echo LANTAU_ALLOW_INSECURE_CONSOLE=1 >> docker/node.env\n" if insecure else "")
        + f"CONSOLE_URL={console} NODE_REGION={region} ADVERTISE_HOST=<this host's private address> \\\n"
        "  docker compose -f docker/compose.node.yaml up -d"
    )
    pip = (
        "# on the new host (Python 3.12; add [gpu] for NVIDIA GPUs)\n"
        "python -m venv lantau && . lantau/bin/activate && pip install 'lantau[gpu]'\n"
        "install -m 600 /dev/null join.token\n"
        f"printf '%s' '{token}' > join.token\n"
        + warning
        + f"LANTAU_JOIN_TOKEN=$(cat join.token) python -m inference.agent --console {console} \\\n"
        + ("  --allow-insecure-console \\\n" if insecure else "")
        + f"  --region {region} --advertise-host <this host's private address>"
    )
    return {"docker": docker, "pip": pip}
