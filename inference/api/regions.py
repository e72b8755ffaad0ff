"""Regions (``inference.services.regions``): every signed-in user or key lists them; install
administrators add, change and remove them (403 for everyone else, whatever they send)."""

from typing import cast

from ninja import Router, Status

from accounts.install_admin import install_admin_require
from inference.api.fleet import admin_body, body_schema
from inference.schemas import RegionIn, RegionOut, RegionPatch
from inference.selectors import regions_known
from inference.services.regions import region_create, region_delete, region_update

router = Router(tags=["regions"])


@router.get("", response=list[RegionOut])
def region_list(request):
    """Every region, in failover order: where nodes join and deployments ask to run."""
    return regions_known()


@router.post("", response={201: RegionOut}, openapi_extra=body_schema(RegionIn))
def region_new(request):
    """A new region (409 if the name is taken); nodes may then join it and deployments ask for it."""
    payload = cast(RegionIn, admin_body(request, RegionIn))
    region = region_create(actor=request.auth.user, name=payload.name, display_name=payload.display_name,
                           failover_order=payload.failover_order)  # fmt: skip
    return Status(201, region)


@router.patch("/{name}", response=RegionOut, openapi_extra=body_schema(RegionPatch))
def region_change(request, name: str):
    """Change a region's display name or failover order; its name stays."""
    payload = cast(RegionPatch, admin_body(request, RegionPatch))
    return region_update(actor=request.auth.user, name=name, display_name=payload.display_name,
                         failover_order=payload.failover_order)  # fmt: skip


@router.delete("/{name}", response={204: None})
def region_remove(request, name: str):
    """Remove a region; 409 while a node or a deployment uses it."""
    install_admin_require(request.auth.user)
    region_delete(actor=request.auth.user, name=name)
    return Status(204, None)
