from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("retrieval", "0006_learned_floors_and_word_counts"),
    ]

    operations = [
        migrations.AddField(
            model_name="querylog",
            name="feedback",
            field=models.SmallIntegerField(
                blank=True,
                choices=[(1, "Helpful"), (-1, "Not helpful")],
                help_text="What the asker said of the answer on the Ask page.",
                null=True,
            ),
        ),
        migrations.AddField(
            model_name="querylog",
            name="feedback_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
    ]
