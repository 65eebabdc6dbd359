"""Subscriptions to a source's changes (a webhook or e-mail addresses, with
filters), the changes waiting for each, the notifications that carry them and
every attempt at sending one (ingest.notify)."""

import uuid

import django.contrib.postgres.fields
import django.db.models.deletion
import django.utils.timezone
from django.db import migrations, models

import ingest.notify.signing


class Migration(migrations.Migration):
    dependencies = [
        ("ingest", "0011_checks_for_changes_and_publish_tokens"),
        ("sources", "0013_feed_tokens"),
    ]

    operations = [
        migrations.CreateModel(
            name="Notification",
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
                    "key",
                    models.UUIDField(
                        default=uuid.uuid4,
                        editable=False,
                        help_text="In the body and the X-KB-Delivery header: the same on every attempt, for receivers to ignore a body they already have.",
                        unique=True,
                        verbose_name="delivery id",
                    ),
                ),
                (
                    "state",
                    models.CharField(
                        choices=[
                            ("waiting", "Waiting to be sent"),
                            ("sending", "Being sent"),
                            ("sent", "Sent"),
                            ("refused", "Refused by the receiver (not sent again)"),
                        ],
                        default="waiting",
                        max_length=10,
                    ),
                ),
                ("created_at", models.DateTimeField(default=django.utils.timezone.now)),
                (
                    "changes_count",
                    models.PositiveIntegerField(default=0, verbose_name="changes"),
                ),
                ("body", models.TextField(help_text="The JSON body, as sent.")),
                ("attempts", models.PositiveSmallIntegerField(default=0)),
                (
                    "next_attempt_at",
                    models.DateTimeField(default=django.utils.timezone.now),
                ),
                ("claimed_at", models.DateTimeField(blank=True, null=True)),
                ("sent_at", models.DateTimeField(blank=True, null=True)),
                (
                    "last_status",
                    models.PositiveSmallIntegerField(
                        blank=True,
                        help_text="The receiver's HTTP status.",
                        null=True,
                        verbose_name="last status",
                    ),
                ),
                ("last_error", models.TextField(blank=True)),
            ],
            options={
                "ordering": ["-created_at"],
            },
        ),
        migrations.CreateModel(
            name="Subscription",
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
                    "name",
                    models.CharField(
                        help_text="Who it is for, e.g. Docs team's chat bridge",
                        max_length=200,
                    ),
                ),
                (
                    "channel",
                    models.CharField(
                        choices=[
                            ("webhook", "Webhook (a signed JSON POST)"),
                            ("email", "E-mail digest"),
                        ],
                        default="webhook",
                        max_length=10,
                    ),
                ),
                (
                    "url",
                    models.URLField(
                        blank=True,
                        help_text="Where the JSON body is POSTed, e.g. https://hooks.example.com/kb",
                        max_length=2048,
                        verbose_name="webhook URL",
                    ),
                ),
                (
                    "emails",
                    models.TextField(
                        blank=True,
                        help_text="One per line or separated by commas, e.g. docs@example.com",
                        verbose_name="e-mail addresses",
                    ),
                ),
                (
                    "kinds",
                    django.contrib.postgres.fields.ArrayField(
                        base_field=models.CharField(
                            choices=[
                                ("new", "New page"),
                                ("changed", "Content changed"),
                                ("deleted", "Gone (404/410)"),
                                ("restored", "Back after being gone"),
                                ("moved", "Moved (redirects to another page)"),
                                ("duplicate", "Became a duplicate of another page"),
                                ("out_of_scope", "Left every source's scope"),
                            ],
                            max_length=20,
                        ),
                        blank=True,
                        default=list,
                        help_text="Only these kinds of change; none ticked: every kind.",
                        size=None,
                    ),
                ),
                (
                    "url_patterns",
                    models.TextField(
                        blank=True,
                        help_text="Only pages whose URL matches one of these, one per line: a glob (https://docs.example.com/config/*) or, after re:, a regular expression searched in the URL (re:/v[0-9]+/). Empty: every page.",
                        verbose_name="URL patterns",
                    ),
                ),
                (
                    "headings",
                    models.TextField(
                        blank=True,
                        help_text="Only changes to a section under one of these headings, one per line, any case, e.g. Configuration › Options (or Configuration > Options). Pages gone or moved name no section and are not sent. Empty: any section.",
                    ),
                ),
                (
                    "min_lines",
                    models.PositiveIntegerField(
                        default=0,
                        help_text="Only changes of at least this many lines added or removed, e.g. 3 (pages gone or moved always count). 0: any size.",
                        verbose_name="least lines changed",
                    ),
                ),
                (
                    "active",
                    models.BooleanField(
                        default=True,
                        help_text="Untick to stop collecting and sending changes for it.",
                    ),
                ),
                (
                    "secret",
                    models.CharField(
                        default=ingest.notify.signing.secret_new,
                        editable=False,
                        max_length=100,
                    ),
                ),
                (
                    "created_at",
                    models.DateTimeField(
                        default=django.utils.timezone.now, editable=False
                    ),
                ),
                (
                    "last_sent_at",
                    models.DateTimeField(blank=True, editable=False, null=True),
                ),
                (
                    "failures",
                    models.PositiveIntegerField(
                        default=0,
                        editable=False,
                        verbose_name="failed attempts in a row",
                    ),
                ),
                (
                    "disabled_at",
                    models.DateTimeField(blank=True, editable=False, null=True),
                ),
                ("disabled_reason", models.TextField(blank=True, editable=False)),
                (
                    "source",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="subscriptions",
                        to="sources.source",
                    ),
                ),
            ],
            options={
                "ordering": ["source", "name"],
            },
        ),
        migrations.CreateModel(
            name="NotificationAttempt",
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
                ("number", models.PositiveSmallIntegerField(verbose_name="attempt")),
                (
                    "attempted_at",
                    models.DateTimeField(default=django.utils.timezone.now),
                ),
                ("ok", models.BooleanField(verbose_name="sent")),
                (
                    "status",
                    models.PositiveSmallIntegerField(
                        blank=True,
                        help_text="None: no HTTP answer.",
                        null=True,
                        verbose_name="status code",
                    ),
                ),
                ("error", models.CharField(blank=True, max_length=500)),
                (
                    "duration_ms",
                    models.PositiveIntegerField(verbose_name="duration (ms)"),
                ),
                (
                    "notification",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="attempt_log",
                        to="ingest.notification",
                    ),
                ),
                (
                    "subscription",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="attempts",
                        to="ingest.subscription",
                    ),
                ),
            ],
            options={
                "verbose_name": "notification attempt",
                "ordering": ["-attempted_at", "-id"],
            },
        ),
        migrations.AddField(
            model_name="notification",
            name="subscription",
            field=models.ForeignKey(
                on_delete=django.db.models.deletion.CASCADE,
                related_name="notifications",
                to="ingest.subscription",
            ),
        ),
        migrations.CreateModel(
            name="SubscriptionChange",
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
                ("routed_at", models.DateTimeField(default=django.utils.timezone.now)),
                (
                    "change",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="+",
                        to="sources.pageversion",
                    ),
                ),
                (
                    "notification",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="changes",
                        to="ingest.notification",
                    ),
                ),
                (
                    "subscription",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="changes",
                        to="ingest.subscription",
                    ),
                ),
            ],
        ),
        migrations.AddIndex(
            model_name="subscription",
            index=models.Index(
                condition=models.Q(("active", True)),
                fields=["source"],
                name="subscription_active_idx",
            ),
        ),
        migrations.AddConstraint(
            model_name="subscription",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    models.Q(("channel", "webhook"), ("url__gt", "")),
                    models.Q(("channel", "email"), ("emails__gt", "")),
                    _connector="OR",
                ),
                name="subscription_has_a_target",
            ),
        ),
        migrations.AddIndex(
            model_name="notificationattempt",
            index=models.Index(
                fields=["subscription", "-attempted_at"],
                name="notifyattempt_subscription_idx",
            ),
        ),
        migrations.AddIndex(
            model_name="notification",
            index=models.Index(
                condition=models.Q(("state__in", ["waiting", "sending"])),
                fields=["state", "next_attempt_at"],
                name="notification_unsent_idx",
            ),
        ),
        migrations.AddIndex(
            model_name="notification",
            index=models.Index(
                fields=["subscription", "-created_at"],
                name="notification_subscription_idx",
            ),
        ),
        migrations.AddConstraint(
            model_name="notification",
            constraint=models.UniqueConstraint(
                condition=models.Q(("state__in", ["waiting", "sending"])),
                fields=("subscription",),
                name="notification_one_unsent_per_subscription",
            ),
        ),
        migrations.AddIndex(
            model_name="subscriptionchange",
            index=models.Index(
                condition=models.Q(("notification", None)),
                fields=["subscription", "routed_at"],
                name="subscriptionchange_waiting_idx",
            ),
        ),
        migrations.AddConstraint(
            model_name="subscriptionchange",
            constraint=models.UniqueConstraint(
                fields=("subscription", "change"), name="subscriptionchange_once"
            ),
        ),
    ]
