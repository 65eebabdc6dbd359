"""Pushes to Crawlbase now belong to ingest (see ingest 0007, which took the model
over on its table, and 0008, which renamed it)."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("sources", "0007_push_columns_left_out_of_its_insert_have_db_defaults"),
        ("ingest", "0007_push_from_sources"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[migrations.DeleteModel(name="Push")],
        ),
    ]
