"""Pushes to Crawlbase get a lifecycle (queued, sent, delivered, expired, failed)
and at most one in flight per page; sources get Crawlbase options and a page limit.

Pushes recorded before are sent ones, delivered if a delivery came; of several
undelivered pushes of one page only the latest stays in flight."""

import django.utils.timezone
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("sources", "0002_delivery_moves_to_ingest"),
    ]

    operations = [
        migrations.AlterModelOptions(
            name="push",
            options={
                "ordering": ["-queued_at"],
                "verbose_name": "push to Crawlbase",
                "verbose_name_plural": "pushes to Crawlbase",
            },
        ),
        migrations.AddField(
            model_name="push",
            name="attempts",
            field=models.PositiveSmallIntegerField(default=0),
        ),
        migrations.AddField(
            model_name="push",
            name="error",
            field=models.CharField(blank=True, max_length=500),
        ),
        migrations.AddField(
            model_name="push",
            name="next_attempt_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="push",
            name="queued_at",
            field=models.DateTimeField(default=django.utils.timezone.now),
        ),
        migrations.AddField(
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
                default="queued",
                max_length=20,
            ),
        ),
        migrations.AddField(
            model_name="source",
            name="ajax_wait",
            field=models.BooleanField(
                default=False, help_text="Crawlbase: wait for the page's AJAX requests."
            ),
        ),
        migrations.AddField(
            model_name="source",
            name="crawlbase_format",
            field=models.CharField(
                choices=[("html", "HTML"), ("md", "Markdown")],
                default="html",
                help_text="What Crawlbase delivers. HTML lets the content selector pick the main text; Markdown arrives with the page's menus.",
                max_length=10,
                verbose_name="Crawlbase format",
            ),
        ),
        migrations.AddField(
            model_name="source",
            name="max_pages",
            field=models.PositiveIntegerField(
                default=5000,
                help_text="Pages discovered from seeds, sitemaps and links stop at this many, e.g. 5000.",
            ),
        ),
        migrations.AddField(
            model_name="source",
            name="page_wait",
            field=models.PositiveIntegerField(
                blank=True,
                help_text="Crawlbase: milliseconds to wait for JavaScript, e.g. 2000.",
                null=True,
            ),
        ),
        migrations.AlterField(
            model_name="push",
            name="pushed_at",
            field=models.DateTimeField(
                blank=True, help_text="When Crawlbase accepted it.", null=True
            ),
        ),
        migrations.AlterField(
            model_name="push",
            name="rid",
            field=models.CharField(
                blank=True,
                help_text="Given by Crawlbase when the push is accepted.",
                max_length=100,
                null=True,
                unique=True,
                verbose_name="request id",
            ),
        ),
        migrations.RunSQL(
            [
                "UPDATE sources_push SET queued_at = pushed_at, state = 'sent'",
                "UPDATE sources_push SET state = 'delivered' "
                "WHERE delivered_at IS NOT NULL",
                "UPDATE sources_push AS p SET state = 'expired' WHERE state = 'sent' "
                "AND EXISTS (SELECT 1 FROM sources_push AS q WHERE q.page_id = p.page_id "
                "AND q.state = 'sent' AND (q.pushed_at, q.id) > (p.pushed_at, p.id))",
            ],
            migrations.RunSQL.noop,
        ),
        migrations.AddIndex(
            model_name="push",
            index=models.Index(
                condition=models.Q(("state__in", ["queued", "sent"])),
                fields=["state", "next_attempt_at"],
                name="push_state_idx",
            ),
        ),
        migrations.AddConstraint(
            model_name="push",
            constraint=models.UniqueConstraint(
                condition=models.Q(("state__in", ["queued", "sent"])),
                fields=("page",),
                name="push_one_in_flight_per_page",
            ),
        ),
    ]
