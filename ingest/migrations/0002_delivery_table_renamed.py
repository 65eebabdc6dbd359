"""The deliveries' table takes ingest's name, now that sources no longer has it."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("ingest", "0001_delivery_from_sources"),
        ("sources", "0002_delivery_moves_to_ingest"),
    ]

    operations = [
        migrations.AlterModelTable(name="delivery", table=None),
    ]
