import time
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from inference.models import Deployment
from inference.selectors import deployment_status


class Command(BaseCommand):
    help = "Wait until every running deployment has its replicas ready; print each one as it becomes ready."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--timeout", type=float, default=180)

    def handle(self, *args: Any, timeout: float, **options: Any) -> None:
        deadline = time.monotonic() + timeout
        announced: set[str] = set()
        while True:
            pending = []
            for deployment in Deployment.objects.filter(desired_state="running").prefetch_related(
                "replica_set"
            ):
                if deployment_status(deployment) == "ready":
                    if deployment.name not in announced:
                        announced.add(deployment.name)
                        self.stdout.write(f"Deployment {deployment.name} is ready")
                else:
                    pending.append(deployment.name)
            if not pending:
                return
            if time.monotonic() > deadline:
                raise CommandError(f"not ready after {timeout:.0f}s: {', '.join(pending)}")
            time.sleep(0.5)
