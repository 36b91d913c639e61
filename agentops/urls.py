from __future__ import annotations

from django.contrib import admin
from django.urls import include, path

from agentops import api as agentops_api
from agentops.login import (
    AdminLoginForm,
    LoginView,
    LogoutView,
    ProviderCallbackView,
    ProviderSignInView,
    admin_login,
)
from agentops.views import favicon
from reviews import api as reviews_api

# The admin's sign-in is throttled like the product's, and answers the same (agentops.login).
admin.site.login_form = AdminLoginForm
admin.site.login = admin_login(admin.site.login)  # type: ignore[method-assign]
handler500 = "agentops.plumbing.request_ids.server_error"

# The JSON API: one NinjaAPI, each app's router on it. Reviews' first: its `/tasks/stopped` must
# be tried before agentops' `/tasks/{task_id}`, which would take it (see `api_build`).
api = agentops_api.api_build(reviews_api.router, agentops_api.router)

urlpatterns = [
    # The django-rq dashboard: its views admit staff users only.
    path("admin/rq/", include("django_rq.urls")),
    path("admin/", admin.site.urls),
    path("api/v1/", api.urls),
    path("favicon.ico", favicon, name="favicon"),
    path("login/", LoginView.as_view(), name="login"),
    path("logout/", LogoutView.as_view(), name="logout"),
    # Single sign-on (agentops.oidc): both answer 404 while it is off. The names are the
    # library's (mozilla-django-oidc reverses the callback's to build the redirect URI).
    path("oidc/authenticate/", ProviderSignInView.as_view(), name="oidc_authentication_init"),
    path("oidc/callback/", ProviderCallbackView.as_view(), name="oidc_authentication_callback"),
    path("policies/", include("policies.urls")),
    path("review/", include("reviews.urls")),
    path("", include("agentops.web_urls")),
]
