from django.contrib.auth import views as auth_views
from django.urls import path

from accounts import team_views, views

app_name = "accounts"

urlpatterns = [
    path("login/", team_views.ThrottledLoginView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("password/", team_views.PasswordChangeView.as_view(), name="password-change"),
    path("keys/", views.key_list, name="keys"),
    path("keys/<int:key_id>/revoke", views.key_revoke, name="key-revoke"),
    path("team/", team_views.team_page, name="team"),
    path("team/action", team_views.team_action, name="team-action"),
    path("team/switch", team_views.team_switch, name="team-switch"),
    path("teams/new", team_views.team_new, name="team-new"),
    path("invitations/<str:token>/", team_views.invitation, name="invitation"),
]
