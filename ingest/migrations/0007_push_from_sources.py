"""Pushes to Crawlbase move from sources to ingest, whose crawler code sends them.

Ingest takes the model over on its existing table (renamed in 0008, once sources has
let go of it): every row stays, and so does every delivery's link to its push, and
its columns keep the database defaults sources 0007 gave them.
"""

import django.db.models.deletion
import django.db.models.functions.datetime
import django.utils.timezone
from django.db import migrations, models

IN_FLIGHT = models.Q(("state__in", ["queued", "sent"]))


class Migration(migrations.Migration):
    dependencies = [
        ("ingest", "0006_columns_left_out_of_hand_written_inserts_have_db_defaults"),
        ("sources", "0007_push_columns_left_out_of_its_insert_have_db_defaults"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name="Push",
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
                                blank=True,
                                help_text="Given by Crawlbase when the push is accepted.",
                                max_length=100,
                                null=True,
                                unique=True,
                                verbose_name="request id",
                            ),
                        ),
                        ("url", models.URLField(max_length=2048, verbose_name="URL")),
                        (
                            "state",
                            models.CharField(
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
                        (
                            "queued_at",
                            models.DateTimeField(
                                db_default=django.db.models.functions.datetime.Now(),
                                default=django.utils.timezone.now,
                            ),
                        ),
                        (
                            "pushed_at",
                            models.DateTimeField(
                                blank=True,
                                help_text="When Crawlbase accepted it.",
                                null=True,
                            ),
                        ),
                        ("delivered_at", models.DateTimeField(blank=True, null=True)),
                        (
                            "attempts",
                            models.PositiveSmallIntegerField(db_default=0, default=0),
                        ),
                        (
                            "next_attempt_at",
                            models.DateTimeField(blank=True, null=True),
                        ),
                        (
                            "error",
                            models.CharField(
                                blank=True, db_default="", default="", max_length=500
                            ),
                        ),
                        (
                            "page",
                            models.ForeignKey(
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="pushes",
                                to="sources.page",
                            ),
                        ),
                    ],
                    options={
                        "verbose_name": "push to Crawlbase",
                        "verbose_name_plural": "pushes to Crawlbase",
                        "ordering": ["-queued_at"],
                        "db_table": "sources_push",
                        "indexes": [
                            models.Index(
                                fields=["page", "-pushed_at"], name="push_page_idx"
                            ),
                            models.Index(
                                condition=IN_FLIGHT,
                                fields=["state", "next_attempt_at"],
                                name="push_state_idx",
                            ),
                        ],
                        "constraints": [
                            models.UniqueConstraint(
                                condition=IN_FLIGHT,
                                fields=("page",),
                                name="push_one_in_flight_per_page",
                            ),
                        ],
                    },
                ),
                migrations.AlterField(
                    model_name="delivery",
                    name="push",
                    field=models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        related_name="+",
                        to="ingest.push",
                    ),
                ),
            ],
        ),
    ]
