from django.urls import path

from retrieval.views import (
    AnswerFeedbackView,
    AnswerView,
    QueryView,
    SearchView,
    WidgetFeedbackView,
    WidgetQueryView,
)

app_name = "retrieval"
urlpatterns = [
    path("search/", SearchView.as_view(), name="search"),
    path("query/", QueryView.as_view(), name="query"),
    path("answers/<int:log_id>/", AnswerView.as_view(), name="answer"),
    path(
        "answers/<int:log_id>/feedback/",
        AnswerFeedbackView.as_view(),
        name="answer-feedback",
    ),
    path("widget/query/", WidgetQueryView.as_view(), name="widget-query"),
    path("widget/feedback/", WidgetFeedbackView.as_view(), name="widget-feedback"),
]
