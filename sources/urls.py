from django.urls import path

from sources import changes, feeds

urlpatterns = [
    path("", feeds.feeds_page, name="feeds"),
    path("changes.atom", feeds.changes_atom, name="feeds-atom"),
    path("changes.json", feeds.changes_json, name="feeds-json"),
    path("changes/<int:change_id>/", changes.change_page, name="feeds-change"),
    path(
        "sources/<int:source_id>/changes.atom",
        feeds.changes_atom,
        name="feeds-source-atom",
    ),
    path(
        "sources/<int:source_id>/changes.json",
        feeds.changes_json,
        name="feeds-source-json",
    ),
]
