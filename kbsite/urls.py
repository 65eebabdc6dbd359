from django.contrib import admin
from django.contrib.auth.views import LoginView, LogoutView
from django.urls import include, path, re_path
from django.views.generic import RedirectView
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from ingest.stats.dashboard import dashboard
from kbsite.views import healthz
from retrieval.views import answer_page, ask, ask_feedback, widget_script

urlpatterns = [
    path("", ask, name="ask"),
    path("feedback/", ask_feedback, name="ask-feedback"),
    path("answers/<int:log_id>/", answer_page, name="answer"),
    path("widget.js", widget_script, name="widget-script"),
    path("accounts/login/", LoginView.as_view(), name="login"),
    path("accounts/logout/", LogoutView.as_view(), name="logout"),
    path("admin/dashboard/", admin.site.admin_view(dashboard), name="admin-dashboard"),
    # Pushes to Crawlbase moved from sources to ingest: old links lead to them.
    re_path(
        r"^admin/sources/push/(?P<rest>.*)$",
        RedirectView.as_view(
            url="/admin/ingest/push/%(rest)s", permanent=True, query_string=True
        ),
    ),
    path("admin/", admin.site.urls),
    path("api/", include("retrieval.urls")),
    path("api/", include("ingest.api_urls")),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    path(
        "api/docs/", SpectacularSwaggerView.as_view(url_name="schema"), name="api-docs"
    ),
    path("feeds/", include("sources.urls")),
    path("healthz/", healthz, name="healthz"),
    path("webhooks/", include("ingest.urls")),
]
