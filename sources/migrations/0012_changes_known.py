from django.db import migrations
from django.db.models import OuterRef, Subquery


def steps_known(apps, schema_editor):
    """Steps recorded before changes were records: each gets its page's source, and
    a page's first step, recorded as "changed", is what it was: a new page."""
    PageVersion = apps.get_model("sources", "PageVersion")
    Page = apps.get_model("sources", "Page")
    PageVersion.objects.filter(source__isnull=True).update(
        source_id=Subquery(
            Page.objects.filter(pk=OuterRef("page_id")).values("source_id")[:1]
        )
    )
    first = (
        PageVersion.objects.filter(page_id=OuterRef("page_id"))
        .order_by("recorded_at", "id")
        .values("id")[:1]
    )
    PageVersion.objects.filter(kind="changed", id=Subquery(first)).update(kind="new")


class Migration(migrations.Migration):
    # Its own migration: the new columns' constraints and indexes are made at the
    # end of theirs, which PostgreSQL refuses after rows were updated in it.
    dependencies = [("sources", "0011_changes_as_records")]

    operations = [migrations.RunPython(steps_known, migrations.RunPython.noop)]
