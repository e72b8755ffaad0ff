"""Regions as data (``inference.models.Region``): install administrators add, rename for people, reorder
and remove them; everything that takes a region (deployments, join tokens, joining nodes, node tokens,
heartbeats) checks it here, against the table, with ``region_require``.

Only install administrators (``accounts.install_admin``) write regions: a region is where the shared
fleet runs, above every team. ``actor`` None is the management command (``manage.py region``), run by
someone with a shell on the console host. Each change is a fleet audit event. A region is removed only
while no node and no deployment uses it (409 otherwise); a join token made for it then fails at join.
"""

from __future__ import annotations

from django.db import IntegrityError, transaction

from accounts.install_admin import audit_fleet, install_admin_require
from contract.regions import REGION_NAME_RULE, region_name_ok
from core.errors import Conflict, NotFound, ValidationFailed
from inference.models import Deployment, Node, Region
from inference.selectors import region_names

DISPLAY_NAME_MAX = 64
ORDER_BOUND = 1_000_000


def _unknown(name: object) -> ValidationFailed:
    names = region_names()
    if not names:
        return ValidationFailed("no region is defined yet: an install administrator adds one first "
                                "(POST /api/v1/regions or manage.py region add)")  # fmt: skip
    return ValidationFailed(f"region must be one of {', '.join(names)}")


def region_require(name: object, *, lock: bool = False) -> Region:
    """The region called ``name``, or ValidationFailed naming the known ones. ``lock`` (in a transaction)
    holds the row until commit, so it cannot be removed while a node or deployment is being given it."""
    if not region_name_ok(name):
        raise _unknown(name)
    rows = Region.objects.filter(name=name)
    if lock:
        rows = rows.select_for_update(no_key=True)
    region = rows.first()
    if region is None:
        raise _unknown(name)
    return region


def region_default() -> str:
    """Where a deployment that names no region goes: the first region in failover order."""
    first = Region.objects.order_by("failover_order", "name").first()
    if first is None:
        raise _unknown("")
    return first.name


def region_usage(name: str) -> dict[str, int]:
    return {"nodes": Node.objects.filter(region=name).count(),
            "deployments": Deployment.objects.filter(region=name).count()}  # fmt: skip


def _view(region: Region) -> dict:
    return {"display_name": region.display_name, "failover_order": region.failover_order}


def _display_name_check(display_name: object) -> str:
    if not isinstance(display_name, str) or not display_name.strip():
        raise ValidationFailed("display_name must be a name for people, e.g. 'Singapore'")
    display_name = display_name.strip()
    if len(display_name) > DISPLAY_NAME_MAX or any(ord(ch) < 32 for ch in display_name):
        raise ValidationFailed(f"display_name: at most {DISPLAY_NAME_MAX} printable characters")
    return display_name


def _order_check(order: object) -> int:
    if isinstance(order, bool) or not isinstance(order, int) or not -ORDER_BOUND <= order <= ORDER_BOUND:
        raise ValidationFailed(
            f"failover_order must be a whole number between {-ORDER_BOUND} and {ORDER_BOUND}"
        )
    return order


def _admin_check(actor) -> None:
    if actor is not None:  # None: the management command
        install_admin_require(actor)


def region_create(*, actor, name: str, display_name: str, failover_order: int | None = None) -> Region:
    """A new region; ``failover_order`` None: after every existing one."""
    _admin_check(actor)
    if not region_name_ok(name):
        raise ValidationFailed(f"name: a region's name is {REGION_NAME_RULE}, e.g. 'sg' or 'eu-central'")
    display_name = _display_name_check(display_name)
    with transaction.atomic():
        if failover_order is None:
            last = Region.objects.order_by("-failover_order").first()
            failover_order = 0 if last is None else min(last.failover_order + 1, ORDER_BOUND)
        failover_order = _order_check(failover_order)
        if Region.objects.filter(name=name).exists():
            raise Conflict(f"a region is already called {name!r}")
        try:
            with transaction.atomic():
                region = Region.objects.create(name=name, display_name=display_name,
                                               failover_order=failover_order)  # fmt: skip
        except IntegrityError:  # the same name added at the same moment
            raise Conflict(f"a region is already called {name!r}") from None
        audit_fleet(actor=actor, action="fleet.region_create", target=name, after=_view(region))
    return region


def region_update(*, actor, name: str, display_name: str | None = None,
                  failover_order: int | None = None) -> Region:  # fmt: skip
    """Change how a region is shown or where it comes in failover order (its name never changes: nodes
    and deployments hold it)."""
    _admin_check(actor)
    if display_name is not None:
        display_name = _display_name_check(display_name)
    if failover_order is not None:
        failover_order = _order_check(failover_order)
    with transaction.atomic():
        region = Region.objects.select_for_update().filter(name=name).first()
        if region is None:
            raise NotFound(f"region {name!r} not found")
        before = _view(region)
        if display_name is not None:
            region.display_name = display_name
        if failover_order is not None:
            region.failover_order = failover_order
        region.save()
        audit_fleet(
            actor=actor, action="fleet.region_update", target=name, before=before, after=_view(region)
        )
    return region


def region_delete(*, actor, name: str) -> None:
    """Remove a region no node and no deployment uses (409 naming what still does)."""
    _admin_check(actor)
    with transaction.atomic():
        region = Region.objects.select_for_update().filter(name=name).first()
        if region is None:
            raise NotFound(f"region {name!r} not found")
        usage = region_usage(name)
        if any(usage.values()):
            used = " and ".join(f"{n} {what if n != 1 else what[:-1]}" for what, n in usage.items() if n)
            raise Conflict(f"region {name!r} is in use by {used}: move or remove them first")
        before = _view(region)
        region.delete()
        audit_fleet(actor=actor, action="fleet.region_delete", target=name, before=before)
