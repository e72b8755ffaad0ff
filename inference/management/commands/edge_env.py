from django.core.management.base import BaseCommand

from contract.redis_acl import REDIS_PASSWORD_ENV, REDIS_USER_ENV
from inference.routes_publish import edge_environment, routes_publish_all


class Command(BaseCommand):
    help = (
        "Print the environment a regional edge needs (KEY=value lines; LANTAU_EDGE_KEY is a secret: put the "
        "lines in a 0600 env file, never on a command line) and publish the route tables once."
    )

    def handle(self, *args, **options):
        written = routes_publish_all()
        self.stderr.write(
            f"{written} route(s) published; start an edge with: python -m inference.edge --region hk"
        )
        for name, value in edge_environment().items():
            if name not in (REDIS_USER_ENV, REDIS_PASSWORD_ENV):  # for agents; the URL carries them
                self.stdout.write(f"{name}={value}")
