# Placeholder filled by the API-key governance change (keyed hashes, expiry, quotas, usage roll-up).
from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("accounts", "0002_api_key_rate_limit")]

    operations: list = []
