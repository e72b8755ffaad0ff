from django.contrib import admin
from django.urls import include, path

from console import views
from console.api import api

console_patterns = [
    path("", views.dashboard, name="dashboard"),
    path("healthz", views.healthz, name="healthz"),
    path("readyz", views.readyz, name="readyz"),
    path("static-vendor/plotly.min.js", views.plotly_js, name="plotly-js"),
]

urlpatterns = [
    path("", include((console_patterns, "console"))),
    path("api/v1/", api.urls),
    path("accounts/", include("accounts.urls")),
    path("", include("inference.urls")),
    path("admin/", admin.site.urls),
]
