from __future__ import annotations

from django.urls import path

from agentops import views

app_name = "agentops"
urlpatterns = [
    path("", views.task_list, name="task_list"),
    path("tasks/new", views.task_new, name="task_new"),
    path("tasks/<int:task_id>", views.task_detail, name="task_detail"),
    path("metrics", views.metrics, name="metrics"),
]
