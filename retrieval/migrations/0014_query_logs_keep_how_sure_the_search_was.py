"""A logged search keeps how sure it was: the best similarity, the floor in force,
the share of the question's weight one passage held and the first page's lead over
the next. Logs from before stay empty, and no answer of theirs counts as doubtful."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("retrieval", "0013_rechecks_logged_as_their_own_kind"),
    ]

    operations = [
        migrations.AddField(
            model_name="querylog",
            name="floor",
            field=models.FloatField(
                blank=True,
                editable=False,
                help_text="The similarity floor in force, e.g. 0.48; empty when none was learned (a log from before it was kept is empty too).",
                null=True,
            ),
        ),
        migrations.AddField(
            model_name="querylog",
            name="held",
            field=models.FloatField(
                blank=True,
                editable=False,
                help_text="Largest share of the question's weight (its words, the rarer the heavier) one passage held, e.g. 0.75.",
                null=True,
            ),
        ),
        migrations.AddField(
            model_name="querylog",
            name="lead",
            field=models.FloatField(
                blank=True,
                editable=False,
                help_text="How far the first page's fused score was ahead of the next page's, as a share of it, e.g. 0.05; 1 when no other page came, negative when a word of the question's own put it first; empty when nothing did.",
                null=True,
            ),
        ),
        migrations.AddField(
            model_name="querylog",
            name="similarity",
            field=models.FloatField(
                blank=True,
                editable=False,
                help_text="Best cosine similarity of a passage the asker could search, e.g. 0.52.",
                null=True,
            ),
        ),
    ]
