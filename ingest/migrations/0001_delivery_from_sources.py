"""Deliveries move from sources to ingest, which drives their whole lifecycle.

Ingest takes the model over on its existing table (renamed in 0002, once sources has
let go of it): every row stays. A delivery now points at the page version it
recorded (the link used to go the other way, from sources into ingest).
"""

import django.db.models.deletion
import django.utils.timezone
from django.db import migrations, models


class Migration(migrations.Migration):
    initial = True

    dependencies = [
        ("sources", "0001_initial"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name="Delivery",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True,
                                primary_key=True,
                                serialize=False,
                                verbose_name="ID",
                            ),
                        ),
                        (
                            "rid",
                            models.CharField(
                                help_text="Crawlbase's rid.",
                                max_length=100,
                                unique=True,
                                verbose_name="request id",
                            ),
                        ),
                        ("url", models.URLField(max_length=2048, verbose_name="URL")),
                        (
                            "original_status",
                            models.PositiveSmallIntegerField(blank=True, null=True),
                        ),
                        (
                            "crawler_status",
                            models.PositiveSmallIntegerField(
                                blank=True,
                                help_text="PC-Status (or CB-Status): the crawler's verdict.",
                                null=True,
                            ),
                        ),
                        ("content_type", models.CharField(blank=True, max_length=200)),
                        (
                            "body",
                            models.BinaryField(
                                help_text="Raw body, kept until processed.", null=True
                            ),
                        ),
                        ("body_bytes", models.PositiveIntegerField(default=0)),
                        (
                            "received_at",
                            models.DateTimeField(default=django.utils.timezone.now),
                        ),
                        ("processed_at", models.DateTimeField(blank=True, null=True)),
                        (
                            "claimed_at",
                            models.DateTimeField(
                                blank=True,
                                help_text="When a worker last started on it.",
                                null=True,
                            ),
                        ),
                        (
                            "next_attempt_at",
                            models.DateTimeField(
                                blank=True,
                                help_text="When a failed attempt will be tried again.",
                                null=True,
                            ),
                        ),
                        (
                            "state",
                            models.CharField(
                                choices=[
                                    ("queued", "Queued"),
                                    ("processing", "Processing"),
                                    ("done", "Done"),
                                    ("failed", "Failed after retries"),
                                ],
                                default="queued",
                                max_length=20,
                            ),
                        ),
                        ("attempts", models.PositiveSmallIntegerField(default=0)),
                        ("embedding_requests", models.PositiveIntegerField(default=0)),
                        (
                            "embedding_tokens",
                            models.PositiveIntegerField(
                                default=0,
                                help_text="Tokens sent to the embedding model for this delivery.",
                            ),
                        ),
                        (
                            "outcome",
                            models.CharField(
                                blank=True,
                                choices=[
                                    ("embedded", "Embedded (content changed)"),
                                    ("unchanged", "Unchanged (verified)"),
                                    ("deleted", "Deleted (tombstoned)"),
                                    ("skipped", "Skipped (crawler or site failure)"),
                                    ("rejected", "Rejected (bad input)"),
                                    ("failed", "Failed"),
                                ],
                                max_length=20,
                            ),
                        ),
                        ("error", models.TextField(blank=True)),
                        (
                            "page",
                            models.ForeignKey(
                                blank=True,
                                null=True,
                                on_delete=django.db.models.deletion.SET_NULL,
                                related_name="deliveries",
                                to="sources.page",
                            ),
                        ),
                        (
                            "push",
                            models.ForeignKey(
                                blank=True,
                                null=True,
                                on_delete=django.db.models.deletion.SET_NULL,
                                related_name="+",
                                to="sources.push",
                            ),
                        ),
                    ],
                    options={
                        "verbose_name_plural": "deliveries",
                        "ordering": ["-received_at"],
                        "db_table": "sources_delivery",
                        "indexes": [
                            models.Index(
                                fields=["state", "received_at"],
                                name="delivery_state_idx",
                            ),
                            models.Index(
                                fields=["-received_at"], name="delivery_received_idx"
                            ),
                        ],
                    },
                ),
            ],
        ),
        migrations.AddField(
            model_name="delivery",
            name="queued_at",
            field=models.DateTimeField(
                default=django.utils.timezone.now,
                help_text="When its job was last put on the queue.",
            ),
        ),
        migrations.RunSQL(
            "UPDATE sources_delivery SET queued_at = received_at",
            migrations.RunSQL.noop,
        ),
        migrations.AddField(
            model_name="delivery",
            name="version",
            field=models.OneToOneField(
                blank=True,
                help_text="The page version this delivery recorded, if it changed the page.",
                null=True,
                on_delete=django.db.models.deletion.SET_NULL,
                related_name="delivery",
                to="sources.pageversion",
            ),
        ),
        migrations.RunSQL(
            # Deferred key checks run now: the columns are altered right after.
            "UPDATE sources_delivery AS d SET version_id = v.id "
            "FROM sources_pageversion AS v WHERE v.delivery_id = d.id; "
            "SET CONSTRAINTS ALL IMMEDIATE",
            "UPDATE sources_pageversion AS v SET delivery_id = d.id "
            "FROM sources_delivery AS d WHERE d.version_id = v.id; "
            "SET CONSTRAINTS ALL IMMEDIATE",
        ),
    ]
