"""The site's own table: the API throttles' recent requests; the shape of a secret
key kept only as its hash; and the transaction's time as an expression. (This
module also makes Django send ``post_migrate`` for the site app, which creates the
cache table then; see ``apps.py``.)"""

from __future__ import annotations

import secrets
from datetime import datetime
from typing import ClassVar

from django.conf import settings
from django.contrib.postgres.fields import ArrayField
from django.db import models
from django.utils import timezone

from kbsite.text import sha256_hex


class ThrottleWindow(models.Model):
    """When one caller's recent requests in one throttle scope were let through.

    Unlogged (see the migration): a crash of the database server only resets the
    counts, and no API request waits for a WAL flush to count itself.
    """

    key = models.CharField(max_length=200, primary_key=True)
    # Seconds since the epoch, of the requests within the scope's period.
    hits = ArrayField(models.FloatField(), default=list)

    class Meta:
        db_table = "kb_throttle"

    def __str__(self) -> str:
        return self.key


class HashedKey(models.Model):
    """A secret handed to a caller that is not a user (a CI step, a web page): only
    its SHA-256 and first characters are stored, the key itself is shown once,
    when it is made. Revoked, never deleted, so the record of who made it stays."""

    PREFIX: ClassVar[str]  # what the key starts with, to tell its kind at a glance

    key_hash = models.CharField(
        "SHA-256 of the key", max_length=64, unique=True, editable=False
    )
    key_start = models.CharField(
        "starts with",
        max_length=12,
        editable=False,
        help_text="The key's first characters, to recognise it.",
    )
    created_at = models.DateTimeField(default=timezone.now, editable=False)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        editable=False,
    )
    last_used_at = models.DateTimeField(null=True, blank=True, editable=False)
    revoked_at = models.DateTimeField(
        null=True,
        blank=True,
        editable=False,
        help_text="From then on the key is refused.",
    )

    class Meta:
        abstract = True
        ordering = ["-created_at"]

    @staticmethod
    def digest(key: str) -> str:
        return sha256_hex(key)

    def key_set(self) -> str:
        """A new random key for this row: its hash and first characters are
        kept, the key itself returned, to be shown once."""
        key = self.PREFIX + secrets.token_urlsafe(32)
        self.key_hash = self.digest(key)
        self.key_start = key[:12]
        return key

    @property
    def is_active(self) -> bool:
        return self.revoked_at is None

    def revoke(self, *, at: datetime) -> bool:
        """Refused from ``at`` on; False if it already was."""
        rows = type(self)._default_manager.filter(pk=self.pk, revoked_at=None)
        return bool(rows.update(revoked_at=at))


class TransactionNow(models.Func):
    """When the transaction began: the same in every statement of it (Django's
    ``Now`` is the statement's time on PostgreSQL)."""

    template = "CURRENT_TIMESTAMP"
    output_field = models.DateTimeField()
