from accounts.selectors import membership_for


def current_team(request):
    membership = membership_for(user=getattr(request, "user", None))
    return {"membership": membership, "team": membership.team if membership else None}
