"""The pushes' table takes ingest's name, now that sources no longer has it."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("ingest", "0007_push_from_sources"),
        ("sources", "0008_push_moves_to_ingest"),
    ]

    operations = [
        migrations.AlterModelTable(name="push", table=None),
    ]
