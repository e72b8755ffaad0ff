# The admin role, one-time invitations, and a readable audit log (before/after, address).
import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models

ROLE_CHOICES = [("owner", "Owner"), ("admin", "Admin"), ("member", "Member"), ("viewer", "Viewer")]


class Migration(migrations.Migration):
    dependencies = [
        ("accounts", "0003_api_key_governance"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AlterField(
            model_name="membership",
            name="role",
            field=models.CharField(choices=ROLE_CHOICES, default="member", max_length=16),
        ),
        migrations.AlterModelOptions(name="auditevent", options={"ordering": ["-created_at", "-pk"]}),
        migrations.AddField(
            model_name="auditevent",
            name="address",
            field=models.GenericIPAddressField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="auditevent", name="after", field=models.JSONField(blank=True, null=True)
        ),
        migrations.AddField(
            model_name="auditevent", name="before", field=models.JSONField(blank=True, null=True)
        ),
        migrations.AddIndex(
            model_name="auditevent",
            index=models.Index(fields=["team", "action"], name="auditevent_team_action"),
        ),
        migrations.CreateModel(
            name="Invitation",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("role", models.CharField(choices=ROLE_CHOICES, default="member", max_length=16)),
                ("email", models.EmailField(blank=True, max_length=254)),
                ("token_hash", models.CharField(max_length=64, unique=True)),
                ("created_at", models.DateTimeField(auto_now_add=True)),
                ("expires_at", models.DateTimeField()),
                ("accepted_at", models.DateTimeField(blank=True, null=True)),
                ("revoked_at", models.DateTimeField(blank=True, null=True)),
                (
                    "team",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="invitations",
                        to="accounts.team",
                    ),
                ),
                (
                    "created_by",
                    models.ForeignKey(
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        related_name="+",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
                (
                    "accepted_by",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        related_name="+",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
            ],
            options={"ordering": ["-created_at", "-pk"]},
        ),
    ]
