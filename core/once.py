"""Forms that create a secret shown once (an API key, a join token): one-time nonces and no-store answers.

The creating POST is answered with the page that shows the secret, never a redirect that parks it in the
session until the next GET: the session is a database row, signed but not encrypted (review L-F). A
reload of that answer makes the browser ask before posting again, and each form also carries a random
nonce. The session remembers the SHA-256 of the nonces that already made something (a nonce is no
secret), so the same form posted again (a reload, a double click) creates nothing and says why.

A post without a nonce (a script) is not guarded; one with a nonce that failed validation may be sent
again, corrected. Submits from one user are serialised on their user row, and the used nonces are read
from the session store under that lock, so two simultaneous posts of one form make one thing.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Callable
from typing import TypeVar

from django.contrib.auth import get_user_model
from django.db import transaction
from django.http import HttpResponse

from core.errors import Conflict

FIELD = "form_nonce"
SESSION_KEY = "lantau-used-form-nonces"
KEEP = 50  # the last nonces remembered per session: enough for any tab still open
T = TypeVar("T")


class AlreadySubmitted(Conflict):
    pass


def new_nonce() -> str:
    """The hidden ``form_nonce`` value for a freshly rendered create form."""
    return secrets.token_urlsafe(24)


def _digest(nonce: str) -> str:
    return hashlib.sha256(nonce.encode()).hexdigest()


def _stored_digests(request) -> list[str]:
    """The used nonces as committed by earlier requests (``request.session`` was read before the lock)."""
    key = request.session.session_key
    stored = type(request.session)(session_key=key).load() if key else {}
    return list(stored.get(SESSION_KEY, []))


def submit_once(request, create: Callable[[], T], *, shown: str) -> T:
    """``create()`` unless this form's nonce already made something: then AlreadySubmitted, whose message
    names what was ``shown`` once. A nonce is used up only when ``create`` returns; its exceptions pass."""
    nonce = request.POST.get(FIELD, "").strip()
    if not nonce:
        return create()
    digest = _digest(nonce)
    with transaction.atomic():
        get_user_model().objects.select_for_update().filter(pk=request.user.pk).first()
        used = _stored_digests(request) + list(request.session.get(SESSION_KEY, []))
        if digest in used:
            raise AlreadySubmitted(
                f"This form was already submitted; the {shown} was shown once, in the answer to it, and "
                "cannot be shown again. Nothing new was created."
            )
        result = create()
        request.session[SESSION_KEY] = list(dict.fromkeys([*used, digest]))[-KEEP:]
        request.session.save()  # committed with the lock's transaction, before the next submit reads it
    return result


def no_store(response: HttpResponse) -> HttpResponse:
    """Keep a page that holds a clear secret out of every cache (and the browser's history cache)."""
    response["Cache-Control"] = "no-store"
    response["Pragma"] = "no-cache"
    return response
