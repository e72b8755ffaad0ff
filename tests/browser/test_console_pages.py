"""A person's path through the console in headless Chromium: sign in, upload, deploy, watch it go ready, make a key."""

from __future__ import annotations

import re

import pytest

from tests.browser.pages import wait_for_js
from tests.support.factories import image_bytes
from tests.support.tiny_models import COLOURS, colour_classifier

pytestmark = [pytest.mark.browser, pytest.mark.e2e]


@pytest.fixture(scope="module")
def bea(stack):
    return {"username": "bea", "password": stack.user("bea", "browser-team", "owner")}


def sign_in(page, stack, person):
    page.goto(stack.url + "/")
    assert "/accounts/login/" in page.url  # the console needs a session
    page.fill("input[name=username]", person["username"])
    page.fill("input[name=password]", person["password"])
    page.click("button[type=submit]")
    page.wait_for_url(stack.url + "/")


def test_wrong_password_shows_an_error(page, stack, bea):
    page.goto(stack.url + "/accounts/login/")
    page.fill("input[name=username]", "bea")
    page.fill("input[name=password]", "not-it")
    page.click("button[type=submit]")
    assert page.locator(".flash.error").inner_text() == "Wrong username or password."


def test_upload_deploy_and_create_key_in_the_browser(page, stack, bea, tmp_path):
    sign_in(page, stack, bea)
    model = colour_classifier(tmp_path / "colours.onnx")
    labels = tmp_path / "labels.txt"
    labels.write_text("\n".join(COLOURS))

    page.click("text=Models")
    page.fill("#upload-form input[name=name]", "browser-colours")
    page.set_input_files("#upload-form input[name=files]", str(model))
    page.set_input_files("#upload-form input[name=labels_file]", str(labels))
    page.click("#upload-form button[type=submit]")
    wait_for_js(page, "() => /Stored|failed/.test(document.getElementById('upload-status').textContent)")
    assert "Stored" in page.locator("#upload-status").inner_text(), page.locator(
        "#upload-status"
    ).inner_text()
    assert "browser-colours:1" in page.locator("#upload-status").inner_text()
    page.wait_for_selector("table a:text-is('browser-colours')")  # the page reloads with the new version

    page.click("text=Deployments")
    errors = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.fill("#deploy-form input[name=name]", "My Model!")
    page.click("#deploy-form button[type=submit]")  # Chromium's own check stops it: no request is sent
    assert page.evaluate("document.querySelector('#deploy-form input[name=name]').validity.patternMismatch")
    assert "/deployments/" in page.url and page.locator(".flash").count() == 0
    assert not [e for e in errors if "pattern" in e]  # the pattern compiles with the v flag
    page.fill("#deploy-form input[name=name]", "browser-colours")
    page.click("#deploy-form button[type=submit]")
    assert "created" in page.locator(".flash").first.inner_text()
    # The status cell turns "ready" through the websocket push, without a reload.
    page.wait_for_selector('tr[data-deployment="browser-colours"] .pill.ready', timeout=60000)
    page.once("dialog", lambda dialog: dialog.dismiss())  # Delete asks first; saying no keeps it
    page.click('tr[data-deployment="browser-colours"] button:text-is("Delete")')
    page.wait_for_timeout(300)
    assert page.locator('tr[data-deployment="browser-colours"]').count() == 1

    page.click("text=API keys")
    page.fill("input[name=name]", "from the browser")
    page.click("text=Create key")
    key = page.locator("#new-key-value").inner_text()
    assert re.fullmatch(r"lt_[0-9a-f]{8}_[A-Za-z0-9_-]{43}", key)
    page.locator("#copy-key").wait_for(state="visible")  # keys.js shows it
    page.reload()  # the create was answered with the key itself (review L-F): a reload posts the form again
    assert page.locator("#new-key-value").count() == 0  # shown once: the same one-time nonce makes nothing
    assert "already submitted; the key was shown once" in page.locator(".flash").first.inner_text()
    assert page.locator("#keys td:text-is('from the browser')").count() == 1

    with stack.client(key) as c:
        r = c.post(
            "/v1/deployments/browser-colours/predict",
            content=image_bytes((0, 200, 0)),
            headers={"Content-Type": "image/jpeg"},
        )
    assert r.status_code == 200 and r.json()["predictions"][0]["label"] == "green"
    page.screenshot(path=str(stack.workdir / "keys.png"), full_page=True)


def test_upload_error_is_shown_with_its_message(page, stack, bea, tmp_path):
    sign_in(page, stack, bea)
    page.click("text=Models")
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"definitely not onnx")
    page.fill("#upload-form input[name=name]", "bad-model")
    page.set_input_files("#upload-form input[name=files]", str(bad))
    page.click("#upload-form button[type=submit]")
    status = page.locator("#upload-status")
    status.filter(has_text="Upload failed").wait_for()
    assert "not a valid ONNX model" in status.inner_text()


def test_tables_sort_when_a_header_is_clicked(page, stack, bea):
    sign_in(page, stack, bea)
    page.click("text=API keys")
    for name in ["zeta", "alpha"]:
        page.fill("input[name=name]", name)
        page.click("text=Create key")
    page.click("th:has-text('Name')")
    names = page.locator("table.sortable tbody tr td:first-child").all_inner_texts()
    assert names == sorted(names)
    page.click("th:has-text('Name')")
    assert page.locator("table.sortable tbody tr td:first-child").all_inner_texts() == sorted(
        names, reverse=True
    )


def test_quantization_job_progress_is_live_and_the_tradeoff_is_plotted(page, stack, bea, tmp_path):
    key = stack.api_key("bea", "manage")
    with stack.client(key) as api:
        r = api.post(
            "/api/v1/models",
            files={"file": ("m.onnx", colour_classifier(tmp_path / "m.onnx").read_bytes())},
            data={"name": "plot-colours", "task": "image-classification", "labels": "\n".join(COLOURS)},
        )
        assert r.status_code == 201
    sign_in(page, stack, bea)
    page.goto(stack.url + "/models/plot-colours/")
    assert "Run a quantization" in page.locator("#tradeoff").inner_text()
    page.select_option("#job-form select[name=kind]", "quantize_int8")
    page.fill("#job-form textarea[name=options]", '{"mode": "dynamic"}')
    page.click("#job-form button[type=submit]")
    # The row's status pill is driven by websocket messages; the page reloads once the job succeeded.
    page.wait_for_selector("#jobs .job-status.succeeded", timeout=90000)
    page.wait_for_selector("#versions td:text-is('plot-colours:2')", timeout=30000)
    page.wait_for_selector("#tradeoff .scatterlayer .point", state="attached", timeout=30000)
    # The parent and its INT8 child, plus the tuning job's tried configurations (a second trace, the
    # kept one drawn as a star).
    assert page.locator("#tradeoff .scatterlayer .trace").count() == 2
    assert page.locator("#tradeoff .scatterlayer .point").count() >= 3
    tried = page.evaluate("document.getElementById('tradeoff').data[1]")
    assert tried["name"] == "tried configurations" and tried["marker"]["symbol"].count("star") == 1
    page.screenshot(path=str(stack.workdir / "model.png"), full_page=True)


def test_deployment_page_draws_live_latency_and_throughput(page, stack, bea, tmp_path):
    import time

    manage = stack.api_key("bea", "manage")
    infer = stack.api_key("bea", "inference")
    with stack.client(manage) as api:
        v = api.post(
            "/api/v1/models",
            files={"file": ("m.onnx", colour_classifier(tmp_path / "m.onnx").read_bytes())},
            data={"name": "live-colours", "task": "image-classification", "labels": "\n".join(COLOURS)},
        ).json()
        api.post("/api/v1/deployments", json={"name": "live-colours", "model_version_id": v["id"]})
        stack.wait_deployment(api, "live-colours")
    sign_in(page, stack, bea)
    page.goto(stack.url + "/deployments/live-colours/")
    assert page.locator(".pill.ready").count() >= 1
    # No traffic yet: an empty state, not a "Jan 2000" axis.
    assert "Waiting for traffic" in page.locator("#chart-latency .annotation-text").first.text_content()
    assert "2000" not in " ".join(page.locator("#chart-latency .xtick text").all_text_contents())
    with stack.client(infer) as c:
        for _ in range(30):  # about three seconds of traffic: several per-second summaries
            c.post(
                "/v1/deployments/live-colours/predict",
                content=image_bytes(),
                headers={"Content-Type": "image/jpeg"},
            )
            time.sleep(0.1)
    page.wait_for_selector("#live-state:has-text('Live:')", timeout=20000)
    page.wait_for_selector("#chart-latency .scatterlayer .trace", state="attached", timeout=20000)
    names = page.locator("#chart-latency .legendtext").all_text_contents()  # SVG text has no innerText
    assert [n[:3] for n in names][:3] == ["p50", "p95", "p99"]  # legend in percentile order
    dashes = page.evaluate(
        "document.getElementById('chart-latency').data.map(t => t.line.dash + t.line.color)"
    )
    assert len(set(dashes)) == len(dashes)  # p95 no longer drawn like p99
    assert page.locator("#chart-throughput .scatterlayer .trace").count() >= 1
    page.click("#chart-range button:text-is('1 min')")
    span = page.evaluate(
        "(() => { const r = document.getElementById('chart-latency').layout.xaxis.range;"
        " return (new Date(r[1]) - new Date(r[0])) / 1000; })()"
    )
    assert 55 <= span <= 65
    # Scaling up: the new replica's row and the badge follow the status pushes, without a reload.
    with stack.client(manage) as api:
        assert api.patch("/api/v1/deployments/live-colours", json={"replicas": 2}).status_code == 200
    page.wait_for_selector("#replicas tbody tr[data-replica] >> nth=1", timeout=30000)
    wait_for_js(page, "() => document.querySelectorAll('#replicas .pill.ready').length === 2", timeout=60)
    page.wait_for_selector("#deployment-status.ready", timeout=30000)
    page.screenshot(path=str(stack.workdir / "deployment.png"), full_page=True)


def test_every_main_page_fits_a_phone_and_a_desktop(browser, stack, bea, tmp_path):
    """No page scrolls sideways at 390 or 1400 px: wide tables scroll inside their wrapper."""
    manage = stack.api_key("bea", "manage")
    with stack.client(manage) as api:
        v = api.post(
            "/api/v1/models",
            files={"file": ("m.onnx", colour_classifier(tmp_path / "m.onnx").read_bytes())},
            data={"name": "wide-colours", "task": "image-classification", "labels": "\n".join(COLOURS)},
        ).json()
        api.post("/api/v1/deployments", json={"name": "wide-colours", "model_version_id": v["id"]})
    paths = ["/", "/models/", "/models/wide-colours/", "/deployments/", "/deployments/wide-colours/",
             "/accounts/keys/", "/accounts/team/", "/audit/", "/no-such-page/"]  # fmt: skip
    for width in (390, 1400):
        context = browser.new_context(viewport={"width": width, "height": 844})
        page = context.new_page()
        page.set_default_timeout(20000)
        sign_in(page, stack, bea)
        for path in paths:
            page.goto(stack.url + path)
            page.wait_for_load_state("load")
            page.wait_for_timeout(150)  # let Plotly size its charts
            fits = page.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")
            assert fits[0] <= fits[1], f"{path} is {fits[0]} px wide at {width}"
        context.close()
