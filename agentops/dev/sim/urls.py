from __future__ import annotations

from django.urls import path

from agentops.dev.sim import views

app_name = "sim"
handler500 = "agentops.dev.sim.middleware.server_error"
urlpatterns = [
    path("sim/<slug:service>/<slug:operation>", views.call, name="call"),
    path("sim/<slug:service>/<slug:operation>/effects/<str:key>", views.probe, name="probe"),
]
