"""An answer the system asked again for its asker is logged as a recheck, not as a
question that asker typed; rechecks logged before are marked so (a question's
recheck is the only log with ``recheck_of``)."""

from django.db import migrations, models


def rechecks_mark(apps, schema_editor):
    logs = apps.get_model("retrieval", "QueryLog").objects
    logs.filter(kind="query", recheck_of__isnull=False).update(kind="recheck")


def rechecks_unmark(apps, schema_editor):
    logs = apps.get_model("retrieval", "QueryLog").objects
    logs.filter(kind="recheck").update(kind="query")


class Migration(migrations.Migration):
    dependencies = [
        ("retrieval", "0012_widget_keys_share_the_hashed_key_fields"),
    ]

    operations = [
        migrations.AlterField(
            model_name="querylog",
            name="kind",
            field=models.CharField(
                choices=[
                    ("search", "Search"),
                    ("query", "Question"),
                    ("recheck", "Recheck: asked again for its asker"),
                ],
                max_length=10,
            ),
        ),
        migrations.RunPython(rechecks_mark, rechecks_unmark, elidable=True),
    ]
