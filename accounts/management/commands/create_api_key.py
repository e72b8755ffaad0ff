from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from accounts.selectors import membership_for
from accounts.services import api_key_create
from core.errors import ApplicationError


class Command(BaseCommand):
    help = "Create an API key for a user's team. The key alone is printed on the last line."

    def add_arguments(self, parser):
        parser.add_argument("--user", required=True)
        parser.add_argument("--name", required=True)
        parser.add_argument(
            "--scope", action="append", dest="scopes", help="inference (default) or manage; repeatable"
        )

    def handle(self, *args, user, name, scopes, **options):
        account = get_user_model().objects.filter(username=user).first()
        if account is None:
            raise CommandError(f"no user named {user!r}")
        membership = membership_for(user=account)
        if membership is None:
            raise CommandError(f"user {user!r} is not a member of any team")
        try:
            api_key, clear = api_key_create(team=membership.team, actor=account, name=name, scopes=scopes)
        except ApplicationError as exc:
            raise CommandError(exc.message) from None
        self.stderr.write(
            f"Created key {api_key.prefix} for team {membership.team.name} (scopes: {', '.join(api_key.scopes)})"
        )
        self.stdout.write(clear)
