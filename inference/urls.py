from django.urls import path

from inference import views

app_name = "inference"

urlpatterns = [
    path("models/", views.model_list, name="model-list"),
    path("deployments/", views.deployment_list, name="deployment-list"),
    path("deployments/<slug:name>/action", views.deployment_action, name="deployment-action"),
]
