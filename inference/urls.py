from django.urls import path

from inference import job_views, node_views, playground, views

app_name = "inference"

urlpatterns = [
    path("models/", views.model_list, name="model-list"),
    path("models/<slug:name>/", views.model_detail, name="model-detail"),
    path("models/<slug:name>/jobs", views.job_new, name="job-new"),
    path("jobs/", job_views.job_list, name="job-list"),
    path("jobs/<int:job_id>/", views.job_detail, name="job-detail"),
    path("jobs/<int:job_id>/action", views.job_action, name="job-action"),
    path("jobs/<int:job_id>/disagreements.json", views.job_disagreements, name="job-disagreements"),
    path("nodes/", node_views.node_list, name="node-list"),
    path("nodes/join-token", node_views.node_join_token, name="node-join-token"),
    path("nodes/<slug:name>/", node_views.node_detail, name="node-detail"),
    path("nodes/<slug:name>/action", node_views.node_action, name="node-action"),
    path("deployments/", views.deployment_list, name="deployment-list"),
    path("deployments/<slug:name>/", views.deployment_detail, name="deployment-detail"),
    path("deployments/<slug:name>/action", views.deployment_action, name="deployment-action"),
    # the playground (inference/playground.py)
    path("playground/", playground.playground, name="playground"),
    path("playground/key", playground.playground_key, name="playground-key"),
    path("playground/samples/<slug:name>.jpg", playground.playground_sample, name="playground-sample"),
    path(
        "deployments/<slug:name>/playground", playground.deployment_playground, name="deployment-playground"
    ),
]
