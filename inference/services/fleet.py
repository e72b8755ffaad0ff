"""What each team may use of the shared fleet: node pools and team grants (review H-A).

Install administrators (``accounts.install_admin``) define node pools (a label selector and/or named
nodes) and grant each team some of them, with caps on the team's replicas, GPUs and GPU memory across
all its deployments (``FleetGrant``). Placement reads the grant (``scheduler.cluster.grant_for``): a
team granted pools is placed only on their nodes, and each refused node says "not granted to team X".
A team with no grant, or a grant without pools, may use every shared node. A team's own nodes
(``Node.team``) are always its own and never another team's.
"""

from __future__ import annotations

from django.db import transaction

from accounts.install_admin import audit_fleet, install_admin_require
from accounts.models import Team
from core.errors import Conflict, NotFound, ValidationFailed
from inference import queue
from inference.models import FleetGrant, NodePool
from inference.services.node_join import NAME_RE, labels_validate

MAX_POOL_NODES = 1000
CAP_FIELDS = ("max_replicas", "max_gpus", "max_gpu_memory_bytes")


def pool_create(*, actor, name: str, selector: dict, nodes: list[str]) -> NodePool:
    install_admin_require(actor)
    if not NAME_RE.match(name or ""):  # pools are named as nodes are
        raise ValidationFailed("name must be lowercase letters, digits and dashes (max 63)")
    selector = labels_validate(selector, field="selector")
    if not isinstance(nodes, list) or len(nodes) > MAX_POOL_NODES:
        raise ValidationFailed(f"nodes must be a list of at most {MAX_POOL_NODES} node names")
    bad = [n for n in nodes if not isinstance(n, str) or not NAME_RE.match(n)]
    if bad:
        raise ValidationFailed(f"nodes: {str(bad[0])[:70]!r} is not a node name")
    if not selector and not nodes:
        raise ValidationFailed("a pool needs a selector (labels), node names, or both")
    with transaction.atomic():
        if NodePool.objects.filter(name=name).exists():
            raise Conflict(f"a node pool is already called {name!r}")
        pool = NodePool.objects.create(name=name, selector=selector, nodes=sorted(set(nodes)))
        audit_fleet(actor=actor, action="fleet.pool_create", target=name,
                    data={"selector": selector, "nodes": pool.nodes})  # fmt: skip
    return pool


def pool_delete(*, actor, name: str) -> None:
    install_admin_require(actor)
    with transaction.atomic():
        pool = NodePool.objects.select_for_update().filter(name=name).first()
        if pool is None:
            raise NotFound(f"node pool {name!r} not found")
        teams = list(pool.grants.values_list("team_id", flat=True))
        pool.delete()
        audit_fleet(actor=actor, action="fleet.pool_delete", target=name, teams=teams)
        transaction.on_commit(queue.deployments_reconcile_all_later)


def grant_set(*, actor, team: Team, pools: list[str], caps: dict[str, int | None]) -> FleetGrant:
    """Replace what ``team`` may use: these pools (empty: every shared node) and these caps."""
    install_admin_require(actor)
    unknown_caps = set(caps) - set(CAP_FIELDS)
    if unknown_caps:
        raise ValidationFailed(f"unknown cap {sorted(unknown_caps)[0]!r}; caps are {', '.join(CAP_FIELDS)}")
    for field, value in caps.items():
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
            raise ValidationFailed(f"{field} must be a whole number of at least 0, or null for no cap")
    found = {p.name: p for p in NodePool.objects.filter(name__in=pools)}
    missing = [p for p in pools if p not in found]
    if missing:
        raise ValidationFailed(f"pools: no node pool is called {str(missing[0])[:70]!r}")
    with transaction.atomic():
        grant, _ = FleetGrant.objects.select_for_update().get_or_create(team=team)
        before = grant_view(grant)
        for field in CAP_FIELDS:
            setattr(grant, field, caps.get(field))
        grant.save()
        grant.pools.set(found.values())
        after = grant_view(grant)
        audit_fleet(actor=actor, action="fleet.grant", target=team.name, teams=[team.pk], before=before,
                    after=after)  # fmt: skip
        transaction.on_commit(queue.deployments_reconcile_all_later)
    return grant


def grant_view(grant: FleetGrant | None) -> dict:
    """A grant as the API and pages show it (a team without one: every shared node, no caps)."""
    if grant is None:
        return {"pools": [], **dict.fromkeys(CAP_FIELDS)}
    return {"pools": sorted(p.name for p in grant.pools.all()), **{f: getattr(grant, f) for f in CAP_FIELDS}}


def grant_of(team: Team) -> dict:
    return {"team": team.name, "team_id": team.pk,
            **grant_view(FleetGrant.objects.filter(team=team).prefetch_related("pools").first())}  # fmt: skip
