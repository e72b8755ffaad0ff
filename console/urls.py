from django.conf import settings
from django.contrib import admin
from django.urls import include, path

from accounts import team_views
from console import views
from console.api import api

console_patterns = [
    path("", views.dashboard, name="dashboard"),
    path("healthz", views.healthz, name="healthz"),
    path("readyz", views.readyz, name="readyz"),
    path("static-vendor/plotly.min.js", views.plotly_js, name="plotly-js"),
    path("audit/", team_views.audit_page, name="audit"),
]

urlpatterns = [
    path("", include((console_patterns, "console"))),
    path("api/v1/", api.urls),
    path("accounts/", include("accounts.urls")),
    path("", include("inference.urls")),
    path("", include("evalsets.urls")),
]

# Django's admin is one more password prompt on the internet: off unless LANTAU_ADMIN=1.
if settings.ADMIN_ENABLED:
    urlpatterns.append(path("admin/", admin.site.urls))
