# The choices of Job.kind come from the job kind registry (inference.jobs.registry); stored values are unchanged.

from django.db import migrations, models

import inference.jobs.registry


class Migration(migrations.Migration):
    dependencies = [
        ("inference", "0002_jobs"),
    ]

    operations = [
        migrations.AlterField(
            model_name="job",
            name="kind",
            field=models.CharField(choices=inference.jobs.registry.kind_choices, max_length=32),
        ),
    ]
