"""Pushes to Crawlbase now belong to ingest (see ingest 0006, which took the model
over on its table, and 0007, which renamed it)."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("sources", "0006_pages_rescoped_to_seed_directories"),
        ("ingest", "0006_push_from_sources"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[migrations.DeleteModel(name="Push")],
        ),
    ]
