# API-key governance: peppered hashes (existing rows stay "sha256" until their first use), expiry,
# per-deployment scopes, monthly quotas, last use address, and usage rolled up per key per hour.
import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("accounts", "0002_api_key_rate_limit")]

    operations = [
        migrations.AddField(
            model_name="apikey",
            name="hash_scheme",
            field=models.CharField(default="sha256", max_length=32),
        ),
        migrations.AddField(
            model_name="apikey", name="digest_sealed", field=models.CharField(blank=True, max_length=128)
        ),
        migrations.AddField(
            model_name="apikey", name="deployments", field=models.JSONField(blank=True, default=list)
        ),
        migrations.AddField(
            model_name="apikey",
            name="quota_requests",
            field=models.PositiveBigIntegerField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="apikey",
            name="quota_images",
            field=models.PositiveBigIntegerField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="apikey",
            name="quota_tokens",
            field=models.PositiveBigIntegerField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="apikey", name="expires_at", field=models.DateTimeField(blank=True, null=True)
        ),
        migrations.AddField(
            model_name="apikey",
            name="last_used_address",
            field=models.GenericIPAddressField(blank=True, null=True),
        ),
        migrations.CreateModel(
            name="ApiKeyUsageBatch",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("batch", models.CharField(max_length=80, unique=True)),
                ("created_at", models.DateTimeField(auto_now_add=True)),
            ],
        ),
        migrations.CreateModel(
            name="ApiKeyUsage",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("hour", models.DateTimeField()),
                ("requests", models.BigIntegerField(default=0)),
                ("images", models.BigIntegerField(default=0)),
                ("tokens", models.BigIntegerField(default=0)),
                (
                    "api_key",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="usage_hours",
                        to="accounts.apikey",
                    ),
                ),
            ],
            options={
                "ordering": ["hour"],
                "constraints": [
                    models.UniqueConstraint(fields=("api_key", "hour"), name="apikeyusage_unique_key_hour")
                ],
            },
        ),
    ]
