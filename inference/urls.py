from django.urls import path

from inference import views

app_name = "inference"

urlpatterns = [
    path("models/", views.model_list, name="model-list"),
    path("models/<slug:name>/", views.model_detail, name="model-detail"),
    path("models/<slug:name>/jobs", views.job_new, name="job-new"),
    path("jobs/<int:job_id>/", views.job_detail, name="job-detail"),
    path("jobs/<int:job_id>/action", views.job_action, name="job-action"),
    path("deployments/", views.deployment_list, name="deployment-list"),
    path("deployments/<slug:name>/", views.deployment_detail, name="deployment-detail"),
    path("deployments/<slug:name>/action", views.deployment_action, name="deployment-action"),
]
