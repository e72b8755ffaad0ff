"""Deactivating a user revokes their API keys (review finding L-K).

Whatever sets ``is_active=False`` through ``User.save()`` (the admin, a shell, a script) revokes every key
the user created, in every team: the rows are marked revoked and their revision bumped, and once the
change commits each key's Redis entry becomes a tombstone with a raised revision floor, so the console's
``/v1/``, edges and runners refuse it at once. Reactivation revives nothing: the user makes new keys. A
deactivation that skips ``save()`` (a queryset ``update``, SQL) is still refused wherever the database is
asked, and the minute sync (``accounts.services.api_keys_sync``) revokes those keys too.
"""

from __future__ import annotations

from django.conf import settings
from django.db.models.signals import post_save


def user_saved(sender, instance, created: bool = False, update_fields=None, **kwargs) -> None:
    if instance.is_active or (update_fields is not None and "is_active" not in update_fields):
        return
    from accounts.services import api_keys_revoke_of_inactive  # services import models: import late

    api_keys_revoke_of_inactive(user=instance)


def connect() -> None:
    post_save.connect(user_saved, sender=settings.AUTH_USER_MODEL, dispatch_uid="lantau-user-deactivated")
