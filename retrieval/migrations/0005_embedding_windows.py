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
        # Undone, a text keeps one vector, its first window's: the layout before
        # holds one per text and space (its code embedded a text once, cut short).
        migrations.RunSQL(
            migrations.RunSQL.noop,
            reverse_sql='DELETE FROM retrieval_embedding WHERE "window" > 0',
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
