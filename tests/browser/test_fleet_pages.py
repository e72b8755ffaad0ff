"""The fleet pages in headless Chromium, against the real stack: a node page whose CPU chart grows with the
agent's heartbeats, the live overview, a running deployment's batching edited in its page and rolled over
replica by replica, an INT8 job started from the form generated from its options schema, and a member of
another team who sees none of it, on the pages and on the websockets. Every page is checked at 390 and
1400 px wide.

Screenshots go to the stack's work folder, or to docs/screenshots/ with LANTAU_UPDATE_SCREENSHOTS=1.
"""

from __future__ import annotations

import json
import threading

import pytest

from tests.browser.pages import overflow, screenshot, sign_in, wait_for_js
from tests.support.deployments import deploy_colours
from tests.support.factories import image_bytes

pytestmark = [pytest.mark.browser, pytest.mark.e2e]
NODE = "local"  # the stack's node agent (HK)
TEAM_ID = (
    "from django.contrib.auth import get_user_model\n"
    "from accounts.selectors import membership_for\n"
    "print(membership_for(user=get_user_model().objects.get(username='nia')).team_id)\n"
)


@pytest.fixture(scope="module")
def fleet(stack, tmp_path_factory):
    """Nia's team with a two-replica colour classifier on the stack's node; Otto owns another team."""
    root = tmp_path_factory.mktemp("fleet")
    nia = {"username": "nia", "password": stack.user("nia", "fleet-team", "owner")}
    otto = {"username": "olga", "password": stack.user("olga", "outside-team", "owner")}
    manage = stack.api_key("nia", "manage")
    created = deploy_colours(stack, manage, "fleet-colours", root, replicas=2)
    with stack.client(manage) as api:
        stack.wait_deployment(api, "fleet-colours", timeout=120)
    team_id = int(stack.manage("shell", "-c", TEAM_ID).strip().splitlines()[-1])
    return {"nia": nia, "otto": otto, "manage": manage, "version_id": created["model_version_id"],
            "team_id": team_id, "infer": stack.api_key("nia", "inference")}  # fmt: skip


def cpu_points(page) -> int:
    return page.evaluate("() => LantauCharts.points(window.lantauNodeCharts.cpu)")


def test_a_node_page_draws_cpu_points_as_heartbeats_arrive(page, stack, fleet):
    page.set_viewport_size({"width": 1400, "height": 1000})
    sign_in(page, stack, fleet["nia"])
    page.click("header nav >> text=Nodes")
    page.click(f"#nodes a:text-is('{NODE}')")
    page.wait_for_url(f"{stack.url}/nodes/{NODE}/")
    assert page.locator("#node-replicas a:text-is('fleet-colours')").count() == 2  # the team's replicas here
    # The history comes first, then one point per heartbeat (every 0.5 s), pushed over the node's websocket.
    # (Counted as added, not as held: a node up for a while has a full history, which the chart keeps.)
    assert wait_for_js(page, "() => LantauCharts.points(window.lantauNodeCharts.cpu)")
    first = page.evaluate("() => LantauCharts.added(window.lantauNodeCharts.cpu)")
    wait_for_js(page, f"() => LantauCharts.added(window.lantauNodeCharts.cpu) >= {first} + 3")
    assert "Live: last heartbeat" in page.locator("#node-live").inner_text()
    assert page.locator("#chart-cpu .annotation-text").count() == 0  # the empty state is gone
    assert page.locator("#chart-cpu .scatterlayer .trace").count() == 1
    screenshot(page, stack, "node.png")


def test_the_overview_shows_traffic_per_region_and_the_nodes_live(page, stack, fleet):
    page.set_viewport_size({"width": 1400, "height": 1000})
    sign_in(page, stack, fleet["nia"])
    stop = threading.Event()

    def traffic() -> None:  # steady requests, so the region's last-second figures are not zero
        with stack.client(fleet["infer"]) as c:
            while not stop.is_set():
                c.post("/v1/deployments/fleet-colours/predict", content=image_bytes(),
                       headers={"Content-Type": "image/jpeg"})  # fmt: skip
                stop.wait(0.05)

    sender = threading.Thread(target=traffic, daemon=True)
    sender.start()
    try:
        # Rendered with zero traffic; the overview's websocket tick brings the requests in.
        wait_for_js(
            page, "() => /ms$/.test(document.querySelector('#regions tr[data-region=hk] .p95').textContent)"
        )
        rps = float(page.locator("#regions tr[data-region=hk] .rps").inner_text())
        assert rps > 0
        screenshot(page, stack, "overview.png")
    finally:
        stop.set()
        sender.join(timeout=10)
    row = page.locator(f"#overview-nodes tr[data-node={NODE}]")
    assert row.locator(".pill").inner_text() == "online"
    assert row.locator(".cpu").inner_text().endswith("%")
    assert page.locator("#attention [data-deployment=fleet-colours]").count() == 0  # ready: nothing to flag


def test_editing_max_batch_size_rolls_the_replicas_over_one_at_a_time(page, stack, fleet):
    page.set_viewport_size({"width": 1400, "height": 1000})
    sign_in(page, stack, fleet["nia"])
    page.goto(stack.url + "/deployments/fleet-colours/")
    old = page.locator("#replicas tr[data-replica]").evaluate_all("rows => rows.map(r => r.dataset.replica)")
    assert len(old) == 2
    form = page.locator("#settings-form")
    assert "Default: 8" in form.inner_text() and "Default: CPU" in form.inner_text()
    assert form.locator("input[name=max_batch_size]").input_value() == "8"
    form.locator("input[name=max_batch_size]").fill("4")
    form.locator("button:text-is('Save and roll out')").click()
    assert "settings done" in page.locator(".flash").first.inner_text()
    assert "batch ≤4" in page.locator("h1").inner_text()
    # Record what the pushes draw: replica ids and how many are ready, at every change of the table.
    page.evaluate("""() => {
      window.seen = [];
      const body = document.querySelector('#replicas tbody');
      const take = () => window.seen.push({
        ids: [...body.querySelectorAll('tr[data-replica]')].map(r => r.dataset.replica),
        ready: body.querySelectorAll('.pill.ready').length,
        states: [...body.querySelectorAll('tr[data-replica] .pill')].map(p => p.textContent)});
      take();
      new MutationObserver(take).observe(body, {childList: true, subtree: true});
    }""")
    wait_for_js(page, f"""() => {{
      const rows = [...document.querySelectorAll('#replicas tr[data-replica]')];
      return rows.length === 2 && rows.every(r => !{json.dumps(old)}.includes(r.dataset.replica))
        && document.querySelectorAll('#replicas .pill.ready').length === 2;
    }}""", timeout=120)  # fmt: skip
    seen = page.evaluate("window.seen")
    assert all(s["ready"] >= 1 for s in seen), seen  # some replica served throughout
    started = {i for s in seen for i in s["ids"]} - set(old)
    assert len(started) >= 2, seen
    # One at a time: a new replica ran beside the old ones before they were all gone.
    assert max((len(set(s["ids"]) - set(old)) for s in seen if set(old) & set(s["ids"])), default=0) >= 1
    with stack.client(fleet["manage"]) as api:
        body = api.get("/api/v1/deployments/fleet-colours").json()
    assert body["max_batch_size"] == 4 and body["status"] == "ready"


def test_an_int8_job_starts_from_the_form_generated_from_its_options_schema(page, stack, fleet):
    page.set_viewport_size({"width": 1400, "height": 1000})
    sign_in(page, stack, fleet["nia"])
    page.click("header nav >> text=Jobs")
    page.select_option("#job-form select[name=version_id]", str(fleet["version_id"]))
    page.select_option("#job-form select[name=kind]", "quantize_int8")
    # Prefilled with what we recommend for image classification, each field saying so.
    assert page.locator("#opt-mode").input_value() == "static"
    assert page.locator("#opt-per_channel").is_checked()
    assert "Recommended for this task" in page.locator("label[for=opt-mode]").inner_text()
    page.select_option("#opt-mode", "dynamic")  # the tiny colour model has no calibration set worth using
    page.check("#raw-toggle")
    raw = page.locator("#job-form textarea[name=options]")
    assert raw.is_visible() and not page.locator("#options-fields").is_visible()
    options = json.loads(raw.input_value())
    assert (
        options["mode"] == "dynamic" and options["per_channel"] is True and options["weight_type"] == "QInt8"
    )
    raw.fill(json.dumps({**options, "reduce_range": True}))
    page.uncheck("#raw-toggle")  # back to the fields, carrying what was typed
    assert page.locator("#opt-reduce_range").is_checked()
    page.click("#job-form button:text-is('Start job')")
    page.wait_for_url(f"{stack.url}/jobs/*/")
    assert "queued" in page.locator(".flash").first.inner_text()
    status = page.locator("#job .job-status").inner_text()
    assert status in ("queued", "running", "succeeded"), status
    shown = json.loads(page.locator("pre.card").first.inner_text())
    assert shown["mode"] == "dynamic" and shown["reduce_range"] is True
    page.goto(stack.url + "/jobs/")
    assert page.locator("#jobs tr[data-job] td:has-text('fleet-colours:1')").count() >= 1


def test_a_member_of_another_team_sees_none_of_it_on_pages_or_websockets(page, stack, fleet):
    sign_in(page, stack, fleet["otto"])
    for path in ("/", "/nodes/", f"/nodes/{NODE}/", "/jobs/", "/deployments/"):
        page.goto(stack.url + path)
        assert "fleet-colours" not in page.content(), path
    assert page.goto(stack.url + "/deployments/fleet-colours/").status == 404
    team = fleet["team_id"]
    # Refused during the handshake (the consumers close before accepting): the socket never opens.
    outcome = page.evaluate("""async (paths) => {
      const seen = {};
      await Promise.all(paths.map(path => new Promise(done => {
        const socket = new WebSocket('ws://' + location.host + path);
        socket.onopen = () => { seen[path] = 'opened'; socket.close(); };
        socket.onclose = () => { seen[path] = seen[path] || 'refused'; done(); };
      })));
      return seen;
    }""", [f"/ws/jobs/?team={team}", f"/ws/deployments/?team={team}", f"/ws/overview/?team={team}",
           "/ws/deployments/fleet-colours/metrics/", "/ws/jobs/"])  # fmt: skip
    assert (
        outcome.pop("/ws/jobs/") == "opened"
    )  # his own team's socket: so the others were refused, not broken
    assert set(outcome.values()) == {"refused"}, outcome
    # His own team's sockets open and carry nothing of Nia's (the overview's first tick, the job replay).
    heard = page.evaluate("""async () => new Promise(done => {
      const got = [];
      const socket = new WebSocket('ws://' + location.host + '/ws/overview/');
      socket.onmessage = e => { got.push(e.data); if (JSON.parse(e.data).type === 'overview.tick') { socket.close(); done(got); } };
    })""")
    assert heard and not any("fleet-colours" in m for m in heard)
    tick = json.loads(heard[-1])
    assert all(r["requests"] == 0 for r in tick["regions"])  # none of Nia's traffic is counted as his


def test_the_fleet_pages_fit_a_phone_and_a_desktop(browser, stack, fleet):
    paths = ["/", "/nodes/", f"/nodes/{NODE}/", "/jobs/", "/deployments/", "/deployments/fleet-colours/"]
    for width in (390, 1400):
        context = browser.new_context(viewport={"width": width, "height": 844})
        page = context.new_page()
        page.set_default_timeout(20000)
        sign_in(page, stack, fleet["nia"])
        for path in paths:
            page.goto(stack.url + path)
            page.wait_for_load_state("load")
            page.wait_for_timeout(150)  # let Plotly size its charts
            assert not overflow(page), f"{path} at {width}: {overflow(page)}"
        context.close()
