"""The schedule that sends queued pushes runs ingest's task now that sources no longer
has it: a stored schedule naming the old path would fail each minute until the
next migrate rewrote it (and a schedule someone added by hand would fail for good)."""

from django.db import migrations

OLD = ("sources: send queued pushes", "sources.tasks.pushes_send_task")
NEW = ("ingest: send queued pushes", "ingest.tasks.pushes_send_task")


def _move(apps, old: tuple[str, str], new: tuple[str, str]) -> None:
    schedules = apps.get_model("django_q", "Schedule").objects
    (old_name, old_func), (new_name, new_func) = old, new
    schedules.filter(func=old_func).update(func=new_func)
    first = schedules.filter(name=old_name).order_by("pk").first()
    if first is not None and not schedules.filter(name=new_name).exists():
        schedules.filter(pk=first.pk).update(name=new_name)
    schedules.filter(name=old_name).delete()


def forwards(apps, schema_editor) -> None:
    _move(apps, OLD, NEW)


def backwards(apps, schema_editor) -> None:
    _move(apps, NEW, OLD)


class Migration(migrations.Migration):
    dependencies = [
        ("ingest", "0008_push_table_renamed"),
        ("django_q", "0014_schedule_cluster"),
    ]

    operations = [migrations.RunPython(forwards, backwards)]
