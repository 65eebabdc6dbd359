"""Deliveries no source covers get an outcome of their own and keep their body for
a while, to be re-queued once a source covers them."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("ingest", "0003_crawl_frontier"),
    ]

    operations = [
        migrations.AlterField(
            model_name="delivery",
            name="body",
            field=models.BinaryField(
                help_text="Raw body, kept until processed (out of scope: kept REJECTED_BODY_KEEP_DAYS days, to be re-queued once a source covers it).",
                null=True,
            ),
        ),
        migrations.AlterField(
            model_name="delivery",
            name="outcome",
            field=models.CharField(
                blank=True,
                choices=[
                    ("embedded", "Embedded (content changed)"),
                    ("unchanged", "Unchanged (verified)"),
                    ("duplicate", "Duplicate (same content as another page)"),
                    ("deleted", "Deleted (tombstoned)"),
                    ("skipped", "Skipped (crawler or site failure)"),
                    ("rejected", "Rejected (bad input)"),
                    ("out_of_scope", "Out of scope (no source covers it)"),
                    ("failed", "Failed"),
                ],
                max_length=20,
            ),
        ),
    ]
