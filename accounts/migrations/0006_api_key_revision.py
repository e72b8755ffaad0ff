# Review finding M-A: a per-key revision signed into the Redis entry and its revision floor.

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("accounts", "0005_api_key_kind"),
    ]

    operations = [
        migrations.AddField(
            model_name="apikey",
            name="revision",
            field=models.PositiveBigIntegerField(default=1),
        ),
    ]
