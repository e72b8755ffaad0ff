"""``manage.py redis_acl``: the Redis ACL users of edges, agents and runners (docs/deployment.md).

``apply [--drop-previous]`` runs ``ACL SETUSER`` for every kind and every deployment (idempotent);
``print [--redis6]`` writes the same users as ACL file lines; ``url <kind> [--deployment d]`` prints a
Redis URL with that user's credentials (a secret: put it in a 0600 file, never on a command line).
"""

from django.core.management.base import BaseCommand, CommandError
from redis.exceptions import RedisError

from contract.redis_acl import KINDS, RUNNER
from inference.credentials import redis_user_url
from inference.services.redis_users import redis_acl_lines, redis_users_apply


class Command(BaseCommand):
    help = "Create, print or hand out the least-privilege Redis ACL users of edges, agents and runners."

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="action", required=True)
        apply = sub.add_parser("apply", help="ACL SETUSER every user (idempotent)")
        apply.add_argument("--drop-previous", action="store_true",
                           help="also delete runner users of deployments that no longer exist")  # fmt: skip
        show = sub.add_parser("print", help="the users as ACL file lines (passwords as SHA-256)")
        show.add_argument(
            "--redis6", action="store_true", help="Redis 6.2 rules (no selectors, no %%R~/%%W~)"
        )
        url = sub.add_parser("url", help="a Redis URL with one user's credentials")
        url.add_argument("kind", choices=KINDS)
        url.add_argument("--deployment", help="the runner's deployment")

    def handle(self, *args, **options):
        action = options["action"]
        if action == "apply":
            try:
                users = redis_users_apply(drop_previous=options["drop_previous"])
            except RedisError as exc:
                raise CommandError(f"Redis refused the ACL users: {exc}") from None
            self.stderr.write(f"{len(users)} Redis user(s) set: {', '.join(users)}")
        elif action == "print":
            for line in redis_acl_lines(selectors=not options["redis6"]):
                self.stdout.write(line)
        else:
            if (options["kind"] == RUNNER) != bool(options["deployment"]):
                raise CommandError("--deployment is for the runner kind, and the runner kind needs it")
            try:
                self.stdout.write(redis_user_url(options["kind"], options["deployment"]))
            except ValueError as exc:
                raise CommandError(str(exc)) from None
