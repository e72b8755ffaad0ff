from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from accounts.models import Membership, Role, Team
from accounts.services import audit_record


class Command(BaseCommand):
    help = "Create a user in a team (created if missing). The generated password alone is printed on the last line."

    def add_arguments(self, parser):
        parser.add_argument("--username", required=True)
        parser.add_argument("--team", required=True)
        parser.add_argument("--role", choices=Role.values, default=Role.MEMBER)

    def handle(self, *args, username, team, role, **options):
        import secrets

        User = get_user_model()
        if User.objects.filter(username=username).exists():
            raise CommandError(f"user {username!r} already exists")
        password = secrets.token_urlsafe(12)
        with transaction.atomic():
            user = User.objects.create_user(username=username, password=password)
            team_obj, _ = Team.objects.get_or_create(name=team)
            Membership.objects.create(team=team_obj, user=user, role=role)
            audit_record(
                team=team_obj, actor=None, action="user.create", target=username, data={"role": role}
            )
        self.stderr.write(f"Created {username} ({role} of {team}); password on the next line")
        self.stdout.write(password)
