"""Adaptive recrawl: each page keeps its recent checks and estimated change rate;
each source its bounds, crawl budget and the plan of its last re-plan."""

import datetime

import django.contrib.postgres.fields
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("sources", "0003_crawlbase_pushing"),
    ]

    operations = [
        migrations.AddField(
            model_name="page",
            name="change_rate",
            field=models.FloatField(
                blank=True,
                editable=False,
                help_text="Estimated changes per hour, from the checks.",
                null=True,
            ),
        ),
        migrations.AddField(
            model_name="page",
            name="check_changed",
            field=django.contrib.postgres.fields.ArrayField(
                base_field=models.BooleanField(),
                default=list,
                editable=False,
                help_text="Whether each of those checks found new content.",
                size=None,
            ),
        ),
        migrations.AddField(
            model_name="page",
            name="check_hours",
            field=django.contrib.postgres.fields.ArrayField(
                base_field=models.FloatField(),
                default=list,
                editable=False,
                help_text="Hours between consecutive successful checks, oldest first.",
                size=None,
            ),
        ),
        migrations.AddField(
            model_name="source",
            name="adaptive_recrawl",
            field=models.BooleanField(
                default=True,
                help_text="Learn each page's interval from how often it changes, within the minimum and maximum below and the crawl budget.",
            ),
        ),
        migrations.AddField(
            model_name="source",
            name="crawl_budget",
            field=models.PositiveIntegerField(
                blank=True,
                help_text="Checks per day the adaptive schedule spends. Empty: as many as checking every page once per recheck interval would.",
                null=True,
                verbose_name="crawl budget per day",
            ),
        ),
        migrations.AddField(
            model_name="source",
            name="recrawl_max",
            field=models.DurationField(
                default=datetime.timedelta(days=30),
                help_text="Adaptive pages, and gone or redirected ones, are checked at least this often, e.g. 30 00:00:00.",
                verbose_name="longest interval",
            ),
        ),
        migrations.AddField(
            model_name="source",
            name="recrawl_min",
            field=models.DurationField(
                default=datetime.timedelta(seconds=3600),
                help_text="Adaptive pages are never checked more often, e.g. 01:00:00.",
                verbose_name="shortest interval",
            ),
        ),
        migrations.AddField(
            model_name="source",
            name="schedule_plan",
            field=models.JSONField(
                blank=True,
                editable=False,
                help_text="The adaptive schedule's price of a check, from the daily re-plan.",
                null=True,
            ),
        ),
        migrations.AlterField(
            model_name="page",
            name="next_crawl_at",
            field=models.DateTimeField(blank=True, editable=False, null=True),
        ),
    ]
