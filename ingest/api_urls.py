from django.urls import path

from ingest.api import CrawlerStatsView, RecrawlView

app_name = "ingest-api"
urlpatterns = [
    path("recrawl/", RecrawlView.as_view(), name="recrawl"),
    path("crawler-stats/", CrawlerStatsView.as_view(), name="crawler-stats"),
]
