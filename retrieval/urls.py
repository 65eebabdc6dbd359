from django.urls import path

from retrieval.views import QueryView, SearchView

app_name = "retrieval"
urlpatterns = [
    path("search/", SearchView.as_view(), name="search"),
    path("query/", QueryView.as_view(), name="query"),
]
