from django.apps import AppConfig


class DatasetsConfig(AppConfig):
    name = "evalsets"
    label = "evalsets"
    verbose_name = "Validation datasets"
    default_auto_field = "django.db.models.BigAutoField"
