# Job.kind no longer takes its choices from the job kind registry (the model layer imports no job kind);
# the registry still validates a kind when a job starts. Stored values are unchanged.

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("inference", "0008_regions"),
    ]

    operations = [
        migrations.AlterField(
            model_name="job",
            name="kind",
            field=models.CharField(max_length=32),
        ),
    ]
