"""A push queued by hand-written SQL gets its state, time, attempts and error
from the database's defaults."""

import django.db.models.functions.datetime
import django.utils.timezone
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("sources", "0006_pages_rescoped_to_seed_directories"),
    ]

    operations = [
        migrations.AlterField(
            model_name="push",
            name="attempts",
            field=models.PositiveSmallIntegerField(db_default=0, default=0),
        ),
        migrations.AlterField(
            model_name="push",
            name="error",
            field=models.CharField(
                blank=True, db_default="", default="", max_length=500
            ),
        ),
        migrations.AlterField(
            model_name="push",
            name="queued_at",
            field=models.DateTimeField(
                db_default=django.db.models.functions.datetime.Now(),
                default=django.utils.timezone.now,
            ),
        ),
        migrations.AlterField(
            model_name="push",
            name="state",
            field=models.CharField(
                choices=[
                    ("queued", "Waiting to be sent"),
                    ("sent", "Sent, waiting for the delivery"),
                    ("delivered", "Delivered"),
                    ("expired", "No delivery in time"),
                    ("failed", "Could not be sent"),
                ],
                db_default="queued",
                default="queued",
                max_length=20,
            ),
        ),
    ]
