"""Deliveries now belong to ingest (see ingest 0001, which renamed their table and
copied each version's delivery link onto the delivery)."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("sources", "0001_initial"),
        ("ingest", "0001_delivery_from_sources"),
    ]

    operations = [
        migrations.RemoveField(model_name="pageversion", name="delivery"),
        migrations.SeparateDatabaseAndState(
            state_operations=[migrations.DeleteModel(name="Delivery")],
        ),
    ]
