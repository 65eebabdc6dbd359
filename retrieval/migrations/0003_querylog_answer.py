"""Query logs keep the answer that was given."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("retrieval", "0002_index_tables"),
    ]

    operations = [
        migrations.AddField(
            model_name="querylog",
            name="answer",
            field=models.TextField(
                blank=True,
                help_text="The answer given to a question; empty for a search.",
            ),
        ),
    ]
