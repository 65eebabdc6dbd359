import django.contrib.postgres.indexes
import django.contrib.postgres.search
from django.db import migrations, models

# Heading path weighs A, headings inside the text B, the text D; Markdown link
# targets are not words of the text.
LINK_TARGET = r"\]\((?:[^()\s]|\([^)]*\))*(?:\s+\"[^\"]*\")?\)"
TEXT = models.Func(
    models.F("text"),
    models.Value(LINK_TARGET),
    models.Value(""),
    models.Value("g"),
    function="regexp_replace",
    output_field=models.TextField(),
)
HEADING_LINES = models.Func(
    TEXT,
    models.Value("^(?!#).*$"),
    models.Value(""),
    models.Value("gn"),
    function="regexp_replace",
    output_field=models.TextField(),
)
SEARCH_VECTOR = django.contrib.postgres.search.CombinedSearchVector(
    django.contrib.postgres.search.CombinedSearchVector(
        django.contrib.postgres.search.SearchVector(
            "heading", config="english", weight="A"
        ),
        "||",
        django.contrib.postgres.search.SearchVector(
            HEADING_LINES, config="english", weight="B"
        ),
        django.contrib.postgres.search.SearchConfig("english"),
    ),
    "||",
    django.contrib.postgres.search.SearchVector(TEXT, config="english", weight="D"),
    django.contrib.postgres.search.SearchConfig("english"),
)


class Migration(migrations.Migration):
    dependencies = [
        ("retrieval", "0003_querylog_answer"),
    ]

    operations = [
        migrations.AddField(
            model_name="chunk",
            name="anchor",
            field=models.CharField(
                blank=True,
                help_text="Id of the section's heading in the page, e.g. VACUUM-BASICS.",
                max_length=200,
            ),
        ),
        # A generated column's expression cannot be altered in place.
        migrations.RemoveIndex(model_name="chunk", name="chunk_search_document_idx"),
        migrations.RemoveField(model_name="chunk", name="search_document"),
        migrations.AddField(
            model_name="chunk",
            name="search_document",
            field=models.GeneratedField(
                db_persist=True,
                expression=SEARCH_VECTOR,
                output_field=django.contrib.postgres.search.SearchVectorField(),
            ),
        ),
        migrations.AddIndex(
            model_name="chunk",
            index=django.contrib.postgres.indexes.GinIndex(
                fields=["search_document"], name="chunk_search_document_idx"
            ),
        ),
    ]
