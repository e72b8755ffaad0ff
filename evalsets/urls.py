from django.urls import path

from evalsets import views

app_name = "datasets"

urlpatterns = [
    path("datasets/", views.dataset_list, name="dataset-list"),
    path("datasets/<slug:name>/delete", views.dataset_remove, name="dataset-delete"),
]
