from django.urls import path

from ingest.api import CrawlerStatsView, PublishView, RecrawlView

app_name = "ingest-api"
urlpatterns = [
    path("recrawl/", RecrawlView.as_view(), name="recrawl"),
    path("crawler-stats/", CrawlerStatsView.as_view(), name="crawler-stats"),
    path("sources/<int:source_id>/publish/", PublishView.as_view(), name="publish"),
]
