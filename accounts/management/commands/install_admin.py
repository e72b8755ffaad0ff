"""``manage.py install_admin --grant ann`` / ``--revoke ann`` / ``--list``: who administers the fleet."""

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from accounts.install_admin import install_admin_set
from core.errors import ApplicationError


class Command(BaseCommand):
    help = (
        "Make a user an install administrator (nodes, join tokens, edges, node pools and team grants), "
        "take the flag away, or list who has it. Team roles never give it."
    )

    def add_arguments(self, parser):
        group = parser.add_mutually_exclusive_group(required=True)
        group.add_argument("--grant", metavar="USERNAME")
        group.add_argument("--revoke", metavar="USERNAME")
        group.add_argument("--list", action="store_true")

    def handle(self, *args, grant=None, revoke=None, list=False, **options):
        User = get_user_model()
        if list:
            for user in User.objects.filter(is_staff=True, is_active=True).order_by("username"):
                self.stdout.write(user.username)
            return
        username = grant or revoke
        user = User.objects.filter(username=username).first()
        if user is None:
            raise CommandError(f"no user called {username!r}")
        try:
            install_admin_set(actor=None, user=user, value=bool(grant))
        except ApplicationError as exc:
            raise CommandError(exc.message) from None
        state = "is now" if grant else "is no longer"
        self.stdout.write(f"{username} {state} an install administrator")
