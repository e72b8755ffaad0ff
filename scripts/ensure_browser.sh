#!/usr/bin/env bash
# Makes sure Chromium is present for the browser tests (Playwright drives /usr/bin/chromium).
# Idempotent: returns at once when the browser is already installed.
set -euo pipefail

CHROMIUM=/usr/bin/chromium

if [ -x "$CHROMIUM" ]; then
    exit 0
fi

if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "ensure_browser: installing chromium for the browser tests (one time)..."
    # A package run cut off earlier leaves dpkg "interrupted" and apt refusing to install: finish it first.
    DEBIAN_FRONTEND=noninteractive dpkg --configure -a >/dev/null 2>&1 || true
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get -f install -y -qq >/dev/null 2>&1 || true
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
    echo "ensure_browser: chromium installed at $CHROMIUM"
else
    echo "ensure_browser: $CHROMIUM not found and cannot install it here (needs root and apt-get)." >&2
    echo "ensure_browser: install Chromium yourself (e.g. 'sudo apt-get install chromium') or the browser tests will fail or be skipped." >&2
fi
