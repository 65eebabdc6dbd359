from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("retrieval", "0005_embedding_windows"),
    ]

    operations = [
        migrations.AddField(
            model_name="embeddingspace",
            name="floor",
            field=models.FloatField(
                blank=True,
                editable=False,
                help_text="Cosine similarity that unrelated questions rarely reach in this index, learned from it (RELEVANCE_FLOOR overrides it), e.g. 0.42.",
                null=True,
            ),
        ),
        migrations.AddField(
            model_name="embeddingspace",
            name="floor_chunks",
            field=models.PositiveIntegerField(
                default=0,
                editable=False,
                help_text="Live chunks when the floor was learned.",
            ),
        ),
        migrations.AddField(
            model_name="embeddingspace",
            name="floor_learned_at",
            field=models.DateTimeField(blank=True, editable=False, null=True),
        ),
        migrations.AddField(
            model_name="embeddingspace",
            name="floor_sample",
            field=models.JSONField(
                blank=True,
                default=dict,
                editable=False,
                help_text="What the floor was learned from: probe similarities.",
            ),
        ),
        migrations.CreateModel(
            name="Lexeme",
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
                ("word", models.CharField(max_length=300, unique=True)),
                ("chunks", models.PositiveIntegerField()),
            ],
        ),
        migrations.CreateModel(
            name="IndexStatistics",
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
                ("chunks", models.PositiveIntegerField(default=0)),
                ("refreshed_at", models.DateTimeField(blank=True, null=True)),
            ],
            options={"verbose_name_plural": "index statistics"},
        ),
    ]
