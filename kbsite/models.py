"""The site's own table: the API throttles' recent requests. (This module also
makes Django send ``post_migrate`` for the site app, which creates the cache table
then; see ``apps.py``.)"""

from __future__ import annotations

from django.contrib.postgres.fields import ArrayField
from django.db import models


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
