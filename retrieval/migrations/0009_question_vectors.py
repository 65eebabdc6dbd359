import django.db.models.deletion
import pgvector.django.vector
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("retrieval", "0008_half_precision_vector_indexes"),
    ]

    operations = [
        migrations.CreateModel(
            name="QuestionVector",
            fields=[
                (
                    "log",
                    models.OneToOneField(
                        on_delete=django.db.models.deletion.CASCADE,
                        primary_key=True,
                        related_name="vector",
                        serialize=False,
                        to="retrieval.querylog",
                    ),
                ),
                (
                    "space",
                    models.CharField(
                        help_text="The space the vector is in, e.g. local/…/384.",
                        max_length=200,
                    ),
                ),
                ("vector", pgvector.django.vector.VectorField()),
                ("created_at", models.DateTimeField(auto_now_add=True)),
            ],
        ),
    ]
