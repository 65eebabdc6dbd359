"""A crawl host can be paused with a reason (a site asking for a longer wait than
CRAWL_MAX_DELAY), and waits already beyond it (a Retry-After or Crawl-delay taken
as sent, up to the year 5195) are brought back to it."""

from datetime import timedelta

from django.conf import settings
from django.db import migrations, models
from django.utils import timezone


def waits_cap(apps, schema_editor):
    cap = timedelta(seconds=settings.CRAWL_MAX_DELAY)
    latest = timezone.now() + cap
    hosts = apps.get_model("ingest", "CrawlHost").objects
    for host in hosts.filter(next_fetch_at__gt=latest):
        host.next_fetch_at = host.paused_until = latest
        host.pause_reason = (
            f"{host.origin}: it had asked for a wait of more than CRAWL_MAX_DELAY "
            f"({settings.CRAWL_MAX_DELAY:,} s); paused until {latest:%Y-%m-%d %H:%M} UTC"
        )
        host.save(update_fields=["next_fetch_at", "paused_until", "pause_reason"])
    hosts.filter(delay__gt=cap.total_seconds()).update(delay=cap.total_seconds())
    urls = apps.get_model("ingest", "CrawlUrl").objects
    urls.filter(state="queued", not_before__gt=latest).update(not_before=latest)


class Migration(migrations.Migration):
    dependencies = [
        ("ingest", "0004_delivery_outcome_out_of_scope"),
    ]

    operations = [
        migrations.AddField(
            model_name="crawlhost",
            name="pause_reason",
            field=models.TextField(
                blank=True,
                db_default="",
                help_text="Why it is paused, e.g. robots.txt asks for a Crawl-delay of 99,999,999,999 s, more than CRAWL_MAX_DELAY (86,400 s).",
            ),
        ),
        migrations.AddField(
            model_name="crawlhost",
            name="paused_until",
            field=models.DateTimeField(
                blank=True,
                help_text="The site asked for a longer wait than CRAWL_MAX_DELAY: nothing goes to it before then.",
                null=True,
            ),
        ),
        migrations.RunPython(waits_cap, migrations.RunPython.noop, elidable=True),
    ]
