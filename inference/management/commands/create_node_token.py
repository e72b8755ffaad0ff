from django.core.management.base import BaseCommand, CommandError

from core.errors import ApplicationError
from inference.services.nodes import node_token_create


class Command(BaseCommand):
    help = "Create a node (or rotate its token). The token alone is printed on the last line."

    def add_arguments(self, parser):
        parser.add_argument("--name", required=True)
        parser.add_argument("--region", required=True, help="a region's name (manage.py region list)")
        parser.add_argument("--max-replicas", type=int, default=8)

    def handle(self, *args, name, region, max_replicas, **options):
        try:
            node, token = node_token_create(name=name, region=region, max_replicas=max_replicas)
        except ApplicationError as exc:
            raise CommandError(exc.message) from None
        self.stderr.write(
            f"Node {node.name} ({node.region}): give its agent the line below as LANTAU_NODE_TOKEN "
            "or in a 0600 file named by --token-file (never on its command line)"
        )
        self.stdout.write(token)
