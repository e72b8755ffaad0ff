"""Access to the console's HTML pages: who is signed in, which team they act for, whose objects they see."""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any, TypeVar

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse

from accounts.current import membership_for_request
from accounts.models import Membership
from accounts.permissions import membership_allows
from core.errors import NotFound

T = TypeVar("T")
MemberView = Callable[..., HttpResponse]


def member_required(view: MemberView) -> Callable[..., HttpResponse]:
    """Anonymous callers go to the login page; people in no team (or not in the hinted one) get 404.

    The view is called as ``view(request, membership, **url_kwargs)`` with the caller's membership of
    the team named by the ``X-Lantau-Team`` header or ``?team=`` hint, else of the team chosen in the
    switcher, else of their first team (`accounts.current`).
    """

    @wraps(view)
    def with_membership(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        membership = membership_for_request(request)
        if membership is None:
            raise Http404("you are not a member of any team")
        return view(request, membership, *args, **kwargs)

    return login_required(with_membership)


def permission_required(action: str) -> Callable[[MemberView], Callable[..., HttpResponse]]:
    """`member_required`, and the caller's role must allow `action` (`accounts.permissions`), else 403."""

    def decorate(view: MemberView) -> Callable[..., HttpResponse]:
        @wraps(view)
        def with_permission(request: HttpRequest, membership: Membership, *args: Any, **kwargs: Any):
            if not membership_allows(membership, action):
                raise PermissionDenied(f"your role ({membership.role}) does not allow {action}")
            return view(request, membership, *args, **kwargs)

        return member_required(with_permission)

    return decorate


def team_object_or_404(get: Callable[..., T], *, membership: Membership, **lookup: Any) -> T:
    """``get(team=membership.team, **lookup)``; another team's object is a 404, as if it did not exist."""
    try:
        return get(team=membership.team, **lookup)
    except NotFound as exc:
        raise Http404(exc.message) from None
