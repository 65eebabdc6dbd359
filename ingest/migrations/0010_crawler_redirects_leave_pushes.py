"""A delivery of the built-in crawler names the URL it asked for when that led
elsewhere, instead of a push to Crawlbase that was never sent: such a push waited
"queued", where the sender could pick it up, and blocked the page's next push while
its delivery was not done.

The crawler's pushes (never sent, with the crawler's rid) become their deliveries'
requested URL; undone, they come back as delivered pushes, which block nothing.
"""

from django.db import migrations, models

CRAWLER_PUSH = "p.attempts = 0 AND (p.rid LIKE 'direct-%' OR p.rid LIKE 'nstproxy-%')"

FORWARD = [
    "UPDATE ingest_delivery AS d SET requested_url = p.url, push_id = NULL "
    f"FROM ingest_push AS p WHERE d.push_id = p.id AND {CRAWLER_PUSH}",
    f"DELETE FROM ingest_push AS p WHERE {CRAWLER_PUSH}",
]
BACKWARD = [
    "INSERT INTO ingest_push (rid, page_id, url, state, queued_at, pushed_at, "
    "delivered_at, attempts, error) "
    "SELECT d.rid, p.id, d.requested_url, 'delivered', d.received_at, "
    "d.received_at, coalesce(d.processed_at, d.received_at), 0, '' "
    "FROM ingest_delivery AS d JOIN sources_page AS p ON p.url = d.requested_url "
    "WHERE d.requested_url <> ''",
    "UPDATE ingest_delivery AS d SET push_id = p.id FROM ingest_push AS p "
    "WHERE p.rid = d.rid AND d.requested_url <> ''",
    # Deferred key checks run now: the column is dropped right after.
    "SET CONSTRAINTS ALL IMMEDIATE",
]


class Migration(migrations.Migration):
    dependencies = [
        ("ingest", "0009_push_sender_schedule_moves_to_ingest"),
        ("sources", "0008_push_moves_to_ingest"),
    ]

    operations = [
        migrations.AddField(
            model_name="delivery",
            name="requested_url",
            field=models.URLField(
                blank=True,
                db_default="",
                help_text="The URL the built-in crawler asked for when it led to "
                "this one (a redirect or a canonical link): that page now points "
                "here. A Crawlbase delivery's push names the URL pushed.",
                max_length=2048,
                verbose_name="requested URL",
            ),
        ),
        migrations.RunSQL(FORWARD, BACKWARD),
    ]
