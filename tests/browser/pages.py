"""Helpers the browser tests share: signing in, waiting on the page's own state, width checks, screenshots."""

from __future__ import annotations

import os
import time
from pathlib import Path

DOCS_SCREENSHOTS = Path(__file__).resolve().parents[2] / "docs" / "screenshots"


def sign_in(page, stack, person: dict) -> None:
    page.goto(stack.url + "/accounts/login/")
    page.fill("input[name=username]", person["username"])
    page.fill("input[name=password]", person["password"])
    page.click("button[type=submit]")
    page.wait_for_url(stack.url + "/")


def wait_for_js(page, expression: str, timeout: float = 20.0) -> object:
    """Poll ``expression`` (JS source, a function or an expression) until it is truthy; return it.

    Used instead of ``page.wait_for_function``, which evaluates its predicate with ``eval`` inside the
    page, something the console's Content-Security-Policy (``script-src 'self'``) may refuse;
    ``page.evaluate`` goes through the DevTools protocol, which the policy does not govern.
    """
    deadline = time.monotonic() + timeout
    while True:
        value = page.evaluate(expression)
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"not true after {timeout} s: {expression}")
        page.wait_for_timeout(100)


def overflow(page) -> str:
    """'' when the page fits its window; else its width and the outermost elements that stick out."""
    return page.evaluate("""() => {
      const wide = document.documentElement.scrollWidth, room = window.innerWidth;
      if (wide <= room) return "";
      const clipped = el => { for (let p = el.parentElement; p && p !== document.body; p = p.parentElement) {
        if (getComputedStyle(p).overflowX !== "visible") return true; } return false; };
      const out = [...document.querySelectorAll("body *")].filter(el => el.getBoundingClientRect().right > room + 1
        && !clipped(el) && !(el.parentElement && el.parentElement.getBoundingClientRect().right > room + 1));
      return wide + " px wide in " + room + ": " + out.slice(0, 5).map(el =>
        el.tagName.toLowerCase() + (el.id ? "#" + el.id : "") + (typeof el.className === "string" && el.className
        ? "." + el.className.split(" ").join(".") : "") + " '" + el.textContent.trim().slice(0, 40) + "'").join(", ");
    }""")


def screenshot(page, stack, name: str) -> Path:
    """Into the stack's work folder, or into docs/screenshots/ with LANTAU_UPDATE_SCREENSHOTS=1 (the README's)."""
    folder = DOCS_SCREENSHOTS if os.environ.get("LANTAU_UPDATE_SCREENSHOTS") == "1" else stack.workdir
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    page.screenshot(path=str(path))
    return path
