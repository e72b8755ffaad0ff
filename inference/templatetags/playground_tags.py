"""`{% playground_panels %}`: the playground's panels, on its own page and on each deployment's page."""

from __future__ import annotations

from django import template
from django.urls import reverse

from inference.models import Deployment, Task
from inference.playground import SAMPLES, deployment_row

register = template.Library()

PANELS = [
    (Task.IMAGE_CLASSIFICATION, "image", "Image"),
    (Task.TEXT_GENERATION, "chat", "Chat"),
    (Task.FEATURE_EXTRACTION, "embed", "Embeddings"),
    (Task.TEXT_CLASSIFICATION, "textcls", "Text classification"),
]


@register.inclusion_tag("inference/playground_panels.html", takes_context=True)
def playground_panels(context, deployments, chosen: str = "", single: bool = False):
    """Panels for `deployments` (a list or queryset). `single`: a deployment's own page (one panel, no
    tabs). `chosen` preselects a deployment and opens its panel."""
    request = context["request"]
    if isinstance(deployments, Deployment):  # a deployment's own page
        deployments = [deployments]
    rows = [deployment_row(d) for d in deployments]
    tasks = {r["task"] for r in rows}
    chosen = chosen if any(r["name"] == chosen for r in rows) else ""  # never echo a name not offered
    panels = [
        {"task": task, "id": slug, "title": title, "rows": [r for r in rows if r["task"] == task]}
        for task, slug, title in PANELS
        if not single or task in tasks
    ]
    chosen_task = next((r["task"] for r in rows if r["name"] == chosen), None)
    open_id = next((p["id"] for p in panels if p["task"] == chosen_task), None)
    open_id = open_id or next((p["id"] for p in panels if p["rows"]), panels[0]["id"] if panels else "")
    return {
        "panels": panels,
        "open_id": open_id,
        "chosen": chosen,
        "single": single,
        "key_url": reverse("inference:playground-key"),
        "base": f"{request.scheme}://{request.get_host()}",
        "samples": [
            {"name": name, "title": title, "url": reverse("inference:playground-sample", args=[name])}
            for name, (_, title) in SAMPLES.items()
        ],
        "csrf_token": context.get("csrf_token"),
        "can_run": context.get("can_run", context.get("can_write", False)),
    }
