"""The scope rule changed: a source without allow patterns reaches the URLs under its
seeds' directories, not its seeds' whole hosts, and a URL its most specific source
denies belongs to no other source unless that source's allow pattern names it
(``sources.scope``). Pages the old rule gave to a neighbour move to the source they
belong to now, with their line shapes; pages that belong to none leave search (their
chunks are deleted, their content dropped, a version says why) and are not checked
again. What was done is printed, one line per page.
"""

from django.db import migrations, models
from django.db.models import F
from django.utils import timezone

from sources.scope import Scope, scope_owner


def _lines(text):
    return [line.strip() for line in text.splitlines() if line.strip()]


def rescope(apps, schema_editor):
    Source = apps.get_model("sources", "Source")
    Page = apps.get_model("sources", "Page")
    scopes, names = [], {}
    for source in Source.objects.order_by("pk"):
        names[source.pk] = source.name
        scopes.append(
            Scope.compile(
                source.pk,
                seeds=_lines(source.seed_urls),
                allow=_lines(source.allow_patterns),
                deny=_lines(source.deny_patterns),
            )
        )
    pages = Page.objects.exclude(status="gone", next_crawl_at=None)
    moved = retired = 0
    for page in pages.only("pk", "url", "source_id").order_by("pk").iterator():
        owner = scope_owner(page.url, scopes)
        if owner == page.source_id:
            continue
        before = names[page.source_id]
        if owner is None:
            _retire(apps, page.pk)
            retired += 1
            print(f"\n  {page.url}: left every scope (was in {before}); out of search")
        else:
            _move(apps, page.pk, owner)
            moved += 1
            print(f"\n  {page.url}: moved from {before} to {names[owner]}")
    if moved or retired:
        print(f"\n  Pages rescoped: {moved} moved, {retired} out of every scope")


def _shapes_leave(apps, page):
    LineShape = apps.get_model("sources", "LineShape")
    examples = dict(
        LineShape.objects.filter(
            source_id=page.source_id, shape__in=page.line_shapes
        ).values_list("shape", "example")
    )
    LineShape.objects.filter(
        source_id=page.source_id, shape__in=page.line_shapes
    ).update(pages=F("pages") - 1)
    return examples


def _move(apps, page_id, owner):
    Page = apps.get_model("sources", "Page")
    LineShape = apps.get_model("sources", "LineShape")
    page = Page.objects.select_for_update().get(pk=page_id)
    examples = _shapes_leave(apps, page)
    for shape in page.line_shapes:
        row, _ = LineShape.objects.get_or_create(
            source_id=owner, shape=shape, defaults={"example": examples.get(shape, "")}
        )
        LineShape.objects.filter(pk=row.pk).update(pages=F("pages") + 1)
    Page.objects.filter(pk=page_id).update(source_id=owner)


def _retire(apps, page_id):
    Page = apps.get_model("sources", "Page")
    now = timezone.now()
    page = Page.objects.select_for_update().get(pk=page_id)
    _shapes_leave(apps, page)
    apps.get_model("retrieval", "Chunk").objects.filter(page_id=page_id).delete()
    Page.objects.filter(pk=page_id).update(
        status="gone",
        deleted_at=now,
        content_hash="",
        markdown="",
        raw_body=None,
        minhash=None,
        minhash_bands=[],
        near_duplicate_of=None,
        near_duplicate_score=None,
        etag="",
        last_modified="",
        line_shapes=[],
        last_changed_at=now,
        next_crawl_at=None,
    )
    apps.get_model("sources", "PageVersion").objects.create(
        page_id=page_id, kind="out_of_scope", recorded_at=now
    )


class Migration(migrations.Migration):
    dependencies = [
        ("sources", "0005_crawl_limits_validators_duplicates"),
        ("retrieval", "0007_querylog_feedback"),
        ("auth", "0012_alter_user_first_name_max_length"),
    ]

    operations = [
        migrations.AlterField(
            model_name="pageversion",
            name="kind",
            field=models.CharField(
                choices=[
                    ("changed", "Content changed"),
                    ("deleted", "Tombstoned (404/410)"),
                    ("restored", "Back after a tombstone"),
                    ("duplicate", "Became a duplicate of another page"),
                    ("out_of_scope", "Left every source's scope"),
                ],
                max_length=20,
            ),
        ),
        migrations.AlterField(
            model_name="source",
            name="allow_patterns",
            field=models.TextField(
                blank=True,
                help_text="Regular expressions, one per line. When given, they replace the seeds' directories: a URL must match one of them to belong to this source, even one another source denies. e.g. ^https://docs\\.example\\.com/",
            ),
        ),
        migrations.AlterField(
            model_name="source",
            name="seed_urls",
            field=models.TextField(
                blank=True,
                help_text="One URL per line, e.g. https://docs.djangoproject.com/en/5.2/. The source holds the pages under each seed's directory: …/hr/ holds /hr/…, a seed of the site's root its whole host.",
                verbose_name="seed URLs",
            ),
        ),
        migrations.AlterField(
            model_name="source",
            name="allowed_groups",
            field=models.ManyToManyField(
                blank=True,
                help_text="Only users in these groups may search this source, and only editors in them see it and its pages in the admin. Empty: every signed-in user may.",
                related_name="sources",
                to="auth.group",
            ),
        ),
        migrations.RunPython(rescope, migrations.RunPython.noop, elidable=True),
    ]
