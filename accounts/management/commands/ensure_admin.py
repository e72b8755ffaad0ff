from django.core.management.base import BaseCommand

from accounts.services import user_ensure_admin


class Command(BaseCommand):
    help = "Create the `admin` superuser and its team if missing; print the password once, when created."

    def handle(self, *args, **options):
        user, password = user_ensure_admin()
        if password:
            self.stdout.write(f"Created user `{user.username}`. Password (shown once): {password}")
        else:
            self.stdout.write(f"User `{user.username}` exists; its password is unchanged.")
