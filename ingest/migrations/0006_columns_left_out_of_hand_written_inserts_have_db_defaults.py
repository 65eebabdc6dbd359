"""Columns the hand-written INSERTs leave out (a delivery's counts, outcome and
error; a new crawl host's robots.txt and delay; a re-queued crawl URL's result,
error and attempts) get the Python default as their database default."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("ingest", "0005_crawl_waits_capped_hosts_paused_with_a_reason"),
    ]

    operations = [
        migrations.AlterField(
            model_name="crawlhost",
            name="delay",
            field=models.FloatField(
                db_default=0.0,
                default=0.0,
                help_text="Seconds between request starts (Crawl-delay).",
            ),
        ),
        migrations.AlterField(
            model_name="crawlhost",
            name="robots_txt",
            field=models.TextField(blank=True, db_default="", default=""),
        ),
        migrations.AlterField(
            model_name="crawlurl",
            name="attempts",
            field=models.PositiveSmallIntegerField(db_default=0, default=0),
        ),
        migrations.AlterField(
            model_name="crawlurl",
            name="error",
            field=models.TextField(blank=True, db_default="", default=""),
        ),
        migrations.AlterField(
            model_name="crawlurl",
            name="result",
            field=models.CharField(
                blank=True,
                choices=[
                    ("fetched", "Fetched and delivered"),
                    ("not_modified", "Unchanged (304 Not Modified)"),
                    ("gone", "Gone (404/410 delivered)"),
                    ("robots", "Skipped: robots.txt or meta robots"),
                    ("scope", "Skipped: out of scope"),
                    ("type", "Skipped: not HTML or Markdown"),
                    ("failed", "Failed"),
                    ("refused", "Refused: private address or bad scheme"),
                ],
                db_default="",
                default="",
                max_length=20,
            ),
        ),
        migrations.AlterField(
            model_name="delivery",
            name="attempts",
            field=models.PositiveSmallIntegerField(db_default=0, default=0),
        ),
        migrations.AlterField(
            model_name="delivery",
            name="embedding_requests",
            field=models.PositiveIntegerField(db_default=0, default=0),
        ),
        migrations.AlterField(
            model_name="delivery",
            name="embedding_tokens",
            field=models.PositiveIntegerField(
                db_default=0,
                default=0,
                help_text="Tokens sent to the embedding model for this delivery.",
            ),
        ),
        migrations.AlterField(
            model_name="delivery",
            name="error",
            field=models.TextField(blank=True, db_default="", default=""),
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
                db_default="",
                default="",
                max_length=20,
            ),
        ),
    ]
