"""People in teams: the users behind the ``owner``, ``teammate``, ``viewer`` and ``outsider`` fixtures.

Olivia owns team acme, where Tom is a member and Vera a viewer; Oscar owns globex and sees none of acme.
Each builder needs the database (the fixtures ask for ``db``).
"""

from __future__ import annotations


def person(username: str, team_name: str, role: str):
    """A user with a ``role`` membership in ``team_name`` (created if new); password ``pw-<username>-123456``."""
    from django.contrib.auth import get_user_model

    from accounts.models import Membership, Team

    user = get_user_model().objects.create_user(username=username, password="pw-" + username + "-123456")
    team, _ = Team.objects.get_or_create(name=team_name)
    Membership.objects.create(team=team, user=user, role=role)
    return user


def owner():
    return person("olivia", "acme", "owner")


def teammate():
    return person("tom", "acme", "member")


def viewer():
    return person("vera", "acme", "viewer")


def outsider():
    return person("oscar", "globex", "owner")
