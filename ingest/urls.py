from django.urls import path

from ingest.delivery.webhook import CrawlbaseWebhookView

app_name = "ingest"
urlpatterns = [
    path("crawlbase/", CrawlbaseWebhookView.as_view(), name="crawlbase-webhook"),
]
