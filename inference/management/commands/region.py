"""``manage.py region add sg --display-name Singapore [--failover-order 2]`` / ``region change sg ...`` /
``region list`` / ``region remove sg``: the regions nodes join and deployments ask for
(``inference.services.regions``; each change is a fleet audit event by no user)."""

from django.core.management.base import BaseCommand, CommandError

from core.errors import ApplicationError
from inference.selectors import regions_known
from inference.services.regions import region_create, region_delete, region_update


class Command(BaseCommand):
    help = (
        "Add, change, list or remove the install's regions (the same as /api/v1/regions for administrators)."
    )

    def add_arguments(self, parser):
        actions = parser.add_subparsers(dest="action", required=True)
        add = actions.add_parser("add", help="a new region")
        add.add_argument("name", help="lowercase letters, digits and dashes (max 32), e.g. sg")
        add.add_argument("--display-name", required=True, help="its name for people, e.g. Singapore")
        add.add_argument("--failover-order", type=int, default=None, help="lowest first; default: last")
        change = actions.add_parser("change", help="a region's display name or failover order")
        change.add_argument("name")
        change.add_argument("--display-name", default=None)
        change.add_argument("--failover-order", type=int, default=None)
        actions.add_parser("list", help="every region, in failover order")
        remove = actions.add_parser("remove", help="a region no node and no deployment uses")
        remove.add_argument("name")

    def handle(self, *args, action, **options):
        try:
            if action == "list":
                for region in regions_known():
                    self.stdout.write(f"{region.name}\t{region.failover_order}\t{region.display_name}")
            elif action == "add":
                region = region_create(actor=None, name=options["name"], display_name=options["display_name"],
                                       failover_order=options["failover_order"])  # fmt: skip
                self.stdout.write(f"region {region.name} ({region.display_name}) added, failover order "
                                  f"{region.failover_order}")  # fmt: skip
            elif action == "change":
                region = region_update(actor=None, name=options["name"], display_name=options["display_name"],
                                       failover_order=options["failover_order"])  # fmt: skip
                self.stdout.write(f"region {region.name} ({region.display_name}), failover order "
                                  f"{region.failover_order}")  # fmt: skip
            else:
                region_delete(actor=None, name=options["name"])
                self.stdout.write(f"region {options['name']} removed")
        except ApplicationError as exc:
            raise CommandError(exc.message) from None
