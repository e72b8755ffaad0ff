"""The playground: try a deployment from the browser through the public `/v1/` API.

The page lists the team's deployments; `static/console/playground*.js` calls `/v1/...` on this origin
with a short-lived, inference-only key minted for the signed-in person (`playground_key`, backed by
`accounts.playground_keys`). No private inference path exists: what the page does, a client can do
with the curl and Python snippets it shows. Bundled sample photos (scikit-image's) are served as JPEG.
"""

from __future__ import annotations

import io
from functools import lru_cache

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from accounts.current import membership_for_request
from accounts.decorators import member_required, team_object_or_404
from accounts.permissions import membership_allows
from accounts.playground_keys import playground_key_mint
from core.errors import ApplicationError, NotFound, Unauthorized
from inference import selectors
from inference.models import Deployment

# name -> (scikit-image function, caption); the cat is what the image classifiers are tried on first.
SAMPLES: dict[str, tuple[str, str]] = {
    "chelsea": ("chelsea", "Cat (Chelsea)"),
    "coffee": ("coffee", "Coffee cup"),
    "astronaut": ("astronaut", "Astronaut"),
    "rocket": ("rocket", "Rocket"),
}


def deployment_row(d: Deployment) -> dict:
    version = d.model_version
    return {
        "name": d.name,
        "task": version.model.task,
        "status": selectors.deployment_status(d),
        "version": str(version),
        "precision": version.precision,
    }


@member_required
def playground(request, membership):
    """The page: one panel per kind of model, each offering the team's deployments of that kind."""
    context = {
        "deployments": selectors.deployments_for_team(team=membership.team).order_by("name"),
        "chosen": request.GET.get("deployment", ""),
        "can_run": membership_allows(membership, "key.create"),
        "role": membership.role,
    }
    return render(request, "inference/playground.html", context)


@member_required
def deployment_playground(request, membership, name: str):
    """`/deployments/<name>/playground`: the playground with this deployment chosen (404 for others')."""
    deployment = team_object_or_404(selectors.deployment_get, membership=membership, name=name)
    return redirect(f"{reverse('inference:playground')}?deployment={deployment.name}")


def _error(exc: ApplicationError) -> JsonResponse:
    return JsonResponse(exc.as_dict(), status=exc.status)


@require_POST
def playground_key(request):
    """Mint a short-lived inference key for the signed-in person's current team (JSON, never cached).

    A session and CSRF token are required (a POST from the page); errors use the `/v1/` envelope: 401
    when signed out, 404 outside the team, 403 when the role may not hold keys (viewers)."""
    try:
        if not request.user.is_authenticated:
            raise Unauthorized("sign in to use the playground")
        membership = membership_for_request(request)
        if membership is None:
            raise NotFound("you are not a member of this team")
        minted = playground_key_mint(team=membership.team, actor=request.user)
    except ApplicationError as exc:
        return _error(exc)
    response = JsonResponse(
        {
            "key": minted.key,
            "prefix": minted.prefix,
            "expires_at": minted.expires_at.isoformat(),
            "team": membership.team.name,
        }
    )
    response["Cache-Control"] = "no-store"
    return response


@lru_cache(maxsize=len(SAMPLES))
def sample_jpeg(name: str) -> bytes:
    """A bundled photo as JPEG bytes (encoded once per process)."""
    import skimage.data  # heavy; only this view needs it
    from PIL import Image

    function, _ = SAMPLES[name]
    buf = io.BytesIO()
    Image.fromarray(getattr(skimage.data, function)()).convert("RGB").save(buf, format="JPEG", quality=90)
    return buf.getvalue()


@login_required
@require_GET
def playground_sample(request, name: str):
    if name not in SAMPLES:
        raise Http404("no such sample image")
    response = HttpResponse(sample_jpeg(name), content_type="image/jpeg")
    response["Cache-Control"] = "private, max-age=86400"
    return response
