"""The playground in headless Chromium, against the real stack: the cat photo through EfficientNet FP32 and
its INT8 child side by side, streaming chat, an embeddings similarity matrix, the shown curl run for real,
another team seeing nothing, and every playground page fitting 390 and 1400 px.

Screenshots go to the stack's work folder, or to docs/screenshots/ with LANTAU_UPDATE_SCREENSHOTS=1 (that
is how the README's images are made).
"""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from tests.browser.pages import screenshot, sign_in, wait_for_js
from tests.support.deployments import deploy_efficientnet_pair, deploy_tiny_chat, deploy_tiny_embedder

pytestmark = [pytest.mark.browser, pytest.mark.e2e]
CAT_CLASSES = {"tabby, tabby cat", "tiger cat", "Egyptian cat"}


@pytest.fixture(scope="module")
def world(stack, tmp_path_factory):
    """Pia's team with four deployments (EfficientNet FP32 and INT8, a tiny chat model, a tiny embedder);
    Oren owns another team with none."""
    root = tmp_path_factory.mktemp("playground")
    pia = {"username": "pia", "password": stack.user("pia", "playground-team", "owner")}
    oren = {"username": "oren", "password": stack.user("oren", "other-team", "owner")}
    manage = stack.api_key("pia", "manage")
    deploy_efficientnet_pair(stack, manage, "pia", "pg-effnet", root)
    deploy_tiny_chat(stack, manage, "pia", "pg-chat", root, context=256)
    deploy_tiny_embedder(stack, manage, "pg-embed", root)
    with stack.client(manage) as api:
        for name in ("pg-effnet-fp32", "pg-effnet-int8", "pg-chat", "pg-embed"):
            stack.wait_deployment(api, name, timeout=120)
    return {"pia": pia, "oren": oren, "root": root, "inference_key": stack.api_key("pia", "inference")}


def test_the_cat_is_classified_by_fp32_and_int8_side_by_side_and_the_curl_shown_works(page, stack, world):
    page.set_viewport_size({"width": 1400, "height": 1060})
    sign_in(page, stack, world["pia"])
    page.click("header nav >> text=Playground")
    page.select_option("#pg-image-deployment", "pg-effnet-fp32")
    page.select_option("#pg-image-compare", "pg-effnet-int8")
    page.click(".pg-sample[data-name=chelsea]")
    page.wait_for_selector("#pg-preview:not([hidden])")
    page.click("#pg-image-run")
    page.wait_for_selector("#pg-image-results .pg-result >> nth=1")
    for name in ("pg-effnet-fp32", "pg-effnet-int8"):
        result = page.locator(f'.pg-result[data-deployment="{name}"]')
        top = result.locator(".pg-bar").first
        assert top.get_attribute("data-label") in CAT_CLASSES, result.inner_text()
        assert result.locator(".pg-bar").count() == 5
        width = top.locator(".pg-fill").evaluate("el => el.getBoundingClientRect().width")
        assert width > 0  # the bar is drawn, as long as its score says
        assert "queue" in result.locator(".pg-timing").inner_text()
        assert "inference" in result.locator(".pg-timing").inner_text()
    agreement = page.locator("#pg-image-agreement")
    assert agreement.is_visible() and (
        "Both say" in agreement.inner_text() or "disagree" in agreement.inner_text()
    )
    # Highlighted labels are exactly those missing from the other side's top 5.
    labels = {n: set(page.locator(f'.pg-result[data-deployment="{n}"] .pg-bar').evaluate_all(
        "els => els.map(e => e.dataset.label)")) for n in ("pg-effnet-fp32", "pg-effnet-int8")}  # fmt: skip
    differs = set(page.locator(".pg-bar.differs").evaluate_all("els => els.map(e => e.dataset.label)"))
    assert differs == labels["pg-effnet-fp32"] ^ labels["pg-effnet-int8"]
    page.evaluate("() => window.scrollTo(0, 0)")
    screenshot(page, stack, "playground-image.png")
    page.click("#pg-image-code summary")

    curl = page.locator("#pg-image-curl").inner_text()
    assert "$LANTAU_API_KEY" in curl and "@'chelsea.jpg'" in curl
    photo = page.request.get(stack.url + "/playground/samples/chelsea.jpg")
    (world["root"] / "chelsea.jpg").write_bytes(photo.body())
    env = {
        "PATH": os.environ["PATH"],
        "LANTAU_API_KEY": world["inference_key"],
    }  # the key stays off the command
    done = subprocess.run(
        ["bash", "-c", curl], cwd=world["root"], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    assert answer["predictions"][0]["label"] in CAT_CLASSES and len(answer["predictions"]) == 5
    assert "predictions" in page.locator("#pg-image-python").text_content()


def test_chat_streams_tokens_as_they_arrive_and_keeps_the_conversation(page, stack, world):
    page.set_viewport_size({"width": 1400, "height": 1000})
    sign_in(page, stack, world["pia"])
    page.goto(stack.url + "/playground/?deployment=pg-chat")
    assert page.locator("#pg-chat").is_visible()  # the chosen deployment opens its panel
    page.fill("#pg-chat-system", "You are Lantau's tiny demo model.")
    page.fill("#pg-chat-temperature", "0")
    page.fill("#pg-chat-max-tokens", "48")
    # Record the answer's text each time the page changes it (one record per drawn token or group of them).
    page.evaluate("""() => {
      window.renders = [];
      new MutationObserver(() => {
        const answers = document.querySelectorAll('#pg-chat-log .pg-msg.assistant .pg-msg-text');
        if (answers.length) window.renders.push(answers[answers.length - 1].textContent);
      }).observe(document.getElementById('pg-chat-log'), {childList: true, subtree: true, characterData: true});
    }""")
    # A slow link (2 KB/s, about 10 events a second) so a person, and the screenshot, can watch it arrive.
    cdp = page.context.new_cdp_session(page)
    cdp.send("Network.enable")
    cdp.send("Network.emulateNetworkConditions",
             {"offline": False, "latency": 0, "downloadThroughput": 2048, "uploadThroughput": -1})  # fmt: skip
    page.fill("#pg-chat-input", "Where is Lantau?")
    page.keyboard.press("Enter")
    # About a third of the answer drawn (or, on a link faster than asked for, all of it).
    wait_for_js(page, "() => { const t = document.querySelector('.pg-msg.assistant.streaming .pg-msg-text');"
                      " return (t && t.textContent.length >= 40) || !document.querySelector('.pg-msg.streaming'); }")  # fmt: skip
    if page.locator(".pg-msg.assistant.streaming").count():
        screenshot(page, stack, "playground-chat.png")  # mid-stream, the cursor still blinking
    page.wait_for_selector(".pg-msg.assistant:not(.streaming) .pg-msg-stats:has-text('tokens/s')")
    cdp.send("Network.emulateNetworkConditions",
             {"offline": False, "latency": 0, "downloadThroughput": -1, "uploadThroughput": -1})  # fmt: skip
    stats = page.locator(".pg-msg.assistant .pg-msg-stats").first.inner_text()
    assert "time to first token" in stats and "48 tokens" in stats
    final = page.locator(".pg-msg.assistant .pg-msg-text").first.text_content()
    renders = [t for t in page.evaluate("window.renders") if t]
    partial = {t for t in renders if t != final}
    assert len(partial) >= 3, renders  # several distinct renders before the last token
    assert all(final.startswith(t) for t in partial)  # each render extends the one before
    body = page.locator("#pg-chat-curl").text_content()
    assert '"stream":true' in body and "You are Lantau" in body and '"temperature":0' in body

    page.fill("#pg-chat-max-tokens", "8")
    page.fill("#pg-chat-input", "And then?")
    page.click("#pg-chat-send")
    wait_for_js(page, "() => document.querySelectorAll('.pg-msg.assistant .pg-msg-stats').length === 2 && "
                      "!document.querySelector('.pg-msg.streaming')")  # fmt: skip
    page.reload()  # the conversation is kept until cleared
    assert page.locator("#pg-chat-log .pg-msg.user").count() == 2
    page.click("#pg-chat-clear")
    assert page.locator("#pg-chat-log .pg-msg").count() == 0


def test_embeddings_give_a_similarity_matrix(page, stack, world):
    sign_in(page, stack, world["pia"])
    page.goto(stack.url + "/playground/")
    page.click("#tab-embed")
    page.click("#pg-embed-run")
    page.wait_for_selector("#pg-embed-matrix")
    cells = page.locator("#pg-embed-matrix td.pg-cell")
    assert cells.count() == 16
    values = [[float(cells.nth(i * 4 + j).inner_text()) for j in range(4)] for i in range(4)]
    assert all(abs(values[i][i] - 1) < 1e-3 for i in range(4))
    assert all(abs(values[i][j] - values[j][i]) < 1e-3 for i in range(4) for j in range(4))
    assert '"input":["A cat sleeps on the sofa."' in page.locator("#pg-embed-curl").text_content()


def test_a_member_of_another_team_sees_and_can_call_none_of_these_deployments(page, stack, world):
    sign_in(page, stack, world["oren"])
    page.goto(stack.url + "/playground/?deployment=pg-effnet-fp32")
    assert page.locator("#playground option[value^='pg-']").count() == 0
    assert "pg-effnet" not in page.content() and 'value="pg-chat"' not in page.content()
    assert page.goto(stack.url + "/deployments/pg-chat/playground").status == 404
    page.goto(stack.url + "/playground/")
    minted = page.evaluate("""async () => {
      const r = await fetch('/playground/key', {method: 'POST', headers: {'X-CSRFToken': document.getElementById('pg-csrf').value}});
      return r.json();
    }""")
    assert minted["team"] == "other-team"
    with stack.client(minted["key"]) as c:
        assert c.get("/v1/models").json()["data"] == []
        r = c.post("/v1/embeddings", json={"model": "pg-embed", "input": ["hello"]})
        assert r.status_code in (403, 404) and r.json()["error"]["message"]
        r = c.post(
            "/v1/deployments/pg-effnet-fp32/predict", content=b"x", headers={"Content-Type": "image/jpeg"}
        )
        assert r.status_code in (403, 404)


def test_an_error_from_the_api_is_shown_in_the_panel(page, stack, world):
    sign_in(page, stack, world["pia"])
    page.goto(stack.url + "/playground/")
    page.set_input_files(
        "#pg-file", files=[{"name": "notes.gif", "mimeType": "image/gif", "buffer": b"GIF89a"}]
    )
    page.click("#pg-image-run")
    error = page.locator("#pg-image-error")
    error.wait_for()
    assert "415" in error.inner_text() and "unsupported" in error.inner_text().lower()


def test_the_playground_pages_fit_a_phone_and_a_desktop_and_work_from_the_keyboard(browser, stack, world):
    for width in (390, 1400):
        context = browser.new_context(viewport={"width": width, "height": 844})
        page = context.new_page()
        page.set_default_timeout(20000)
        sign_in(page, stack, world["pia"])
        page.goto(stack.url + "/playground/")
        page.select_option("#pg-image-compare", "pg-effnet-int8")
        page.click(".pg-sample[data-name=coffee]")
        page.click("#pg-image-run")
        page.wait_for_selector("#pg-image-results .pg-result >> nth=1")
        page.focus("#tab-image")
        for tab in ("chat", "embed", "textcls"):
            page.keyboard.press("ArrowRight")  # the tabs follow the arrow keys
            assert page.locator(f"#pg-{tab}").is_visible()
            fits = page.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")
            assert fits[0] <= fits[1], f"/playground/ ({tab}) is {fits[0]} px wide at {width}"
        page.goto(stack.url + "/deployments/pg-chat/")
        assert page.locator("#deployment-playground #pg-chat-input").is_visible()
        fits = page.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")
        assert fits[0] <= fits[1], f"the deployment page is {fits[0]} px wide at {width}"
        context.close()
