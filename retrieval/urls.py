from django.urls import path

from retrieval.views import AnswerView, QueryView, SearchView, WidgetQueryView

app_name = "retrieval"
urlpatterns = [
    path("search/", SearchView.as_view(), name="search"),
    path("query/", QueryView.as_view(), name="query"),
    path("answers/<int:log_id>/", AnswerView.as_view(), name="answer"),
    path("widget/query/", WidgetQueryView.as_view(), name="widget-query"),
]
