from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("retrieval", "0004_chunk_anchor_and_weighted_search"),
    ]

    operations = [
        migrations.AddField(
            model_name="embedding",
            name="window",
            field=models.PositiveSmallIntegerField(
                default=0,
                help_text="Which window of a text longer than the model reads, from 0.",
            ),
        ),
        migrations.RemoveConstraint(
            model_name="embedding", name="embedding_space_hash_uniq"
        ),
        migrations.AddConstraint(
            model_name="embedding",
            constraint=models.UniqueConstraint(
                fields=("space", "text_hash", "window"),
                name="embedding_space_hash_window_uniq",
            ),
        ),
        migrations.AddField(
            model_name="embeddingspace",
            name="max_input_tokens",
            field=models.PositiveIntegerField(
                default=0,
                help_text="Tokens one vector stands for, if not the model's own.",
            ),
        ),
    ]
