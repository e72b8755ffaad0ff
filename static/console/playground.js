// Playground core: the short-lived key, calls to the public /v1/ API, error text, tabs, "show code".
// The panels (playground_image.js, playground_chat.js, playground_text.js) use window.LantauPlayground.
(function () {
  const root = document.getElementById("playground");
  if (!root) return;
  const keyState = document.getElementById("pg-key");
  const base = root.dataset.base;
  let key = null;
  let keyExpires = 0;

  class PlaygroundError extends Error {
    constructor(status, type, message) { super(message); this.status = status; this.type = type; }
  }

  async function envelope(response) {
    // The /v1/ error envelope {"error": {"type", "message"}}; anything else is described plainly.
    let type = "http_" + response.status, message = response.statusText || "request failed";
    try {
      const body = await response.json();
      if (body && body.error) { type = body.error.type || type; message = body.error.message || message; }
    } catch (e) { /* not JSON: keep the status line */ }
    return new PlaygroundError(response.status, type, message);
  }

  async function mint() {
    if (root.dataset.canRun !== "1") {
      throw new PlaygroundError(403, "forbidden", "your role cannot run models in the playground (it needs the right to hold an API key)");
    }
    keyState.textContent = "Minting a short-lived key…";
    const response = await fetch(root.dataset.keyUrl, {
      method: "POST", credentials: "same-origin",
      headers: {"X-CSRFToken": document.getElementById("pg-csrf").value},
    });
    if (!response.ok) {
      const error = await envelope(response);
      keyState.textContent = "No key: " + error.message;
      throw error;
    }
    const body = await response.json();
    key = body.key;
    keyExpires = Date.parse(body.expires_at);
    const until = new Date(keyExpires).toLocaleTimeString([], {hour: "2-digit", minute: "2-digit"});
    keyState.textContent = "Using short-lived key " + body.prefix + "… for team " + body.team +
      " (inference only, expires at " + until + "; a new one is minted when it does).";
    return key;
  }

  async function currentKey(fresh) {
    if (!fresh && key && Date.now() < keyExpires - 30000) return key;
    return mint();
  }

  // fetch() a /v1/ path with the key; a 401 (expired or revoked meanwhile) mints once more and retries.
  async function v1(path, init) {
    const call = async function (k) {
      const headers = Object.assign({}, init.headers || {}, {Authorization: "Bearer " + k});
      return fetch(path, Object.assign({}, init, {headers: headers, credentials: "omit"}));
    };
    let response = await call(await currentKey(false));
    if (response.status === 401) response = await call(await currentKey(true));
    if (!response.ok) throw await envelope(response);
    return response;
  }

  function describe(error) {
    if (error instanceof PlaygroundError) {
      const hints = {
        401: " (the key was refused)",
        403: "",
        404: " (is the deployment still there?)",
        429: " (slow down, or raise the limit)",
        503: " (the deployment is not ready: check its replicas)",
      };
      return error.status + " " + error.type + ": " + error.message + (hints[error.status] || "");
    }
    if (error && error.name === "AbortError") return "Stopped.";
    return "Could not reach the console: " + (error && error.message ? error.message : error);
  }

  function showError(id, error) {
    const el = document.getElementById(id);
    if (!el) return;
    if (error) { el.textContent = describe(error); el.hidden = false; } else { el.textContent = ""; el.hidden = true; }
  }

  // A shell word: single quotes, with each ' written as '\''.
  function shq(text) { return "'" + String(text).replace(/'/g, "'\\''") + "'"; }

  function pyString(text) { return JSON.stringify(String(text)); }

  // JSON as Python literals (true/false/null differ).
  function pyValue(value, indent) {
    const pad = " ".repeat(indent || 0);
    if (value === null || value === undefined) return "None";
    if (value === true) return "True";
    if (value === false) return "False";
    if (typeof value === "string") return pyString(value);
    if (typeof value === "number") return String(value);
    if (Array.isArray(value)) {
      if (!value.length) return "[]";
      return "[\n" + value.map(v => pad + "    " + pyValue(v, indent + 4) + ",").join("\n") + "\n" + pad + "]";
    }
    const keys = Object.keys(value);
    if (!keys.length) return "{}";
    return "{" + keys.map(k => pyString(k) + ": " + pyValue(value[k], indent)).join(", ") + "}";
  }

  function setCode(panel, curl, python) {
    document.getElementById("pg-" + panel + "-curl").textContent = curl;
    document.getElementById("pg-" + panel + "-python").textContent = python;
  }

  function copyText(button) {
    const source = document.getElementById(button.dataset.copy);
    const text = source.textContent;
    const done = function (label) { button.textContent = label; setTimeout(function () { button.textContent = "Copy"; }, 1500); };
    if (navigator.clipboard && window.isSecureContext) {
      navigator.clipboard.writeText(text).then(function () { done("Copied"); }, function () { done("Select and copy"); });
    } else {
      const range = document.createRange();
      range.selectNodeContents(source);
      const sel = window.getSelection(); sel.removeAllRanges(); sel.addRange(range);
      done(document.execCommand("copy") ? "Copied" : "Selected: press Ctrl+C");
    }
  }
  root.querySelectorAll(".pg-copy").forEach(b => b.addEventListener("click", function () { copyText(b); }));

  // Tabs: click or arrow keys (WAI-ARIA tabs pattern).
  const tabs = Array.from(root.querySelectorAll("[role=tab]"));
  function openTab(tab, focus) {
    tabs.forEach(function (t) {
      const on = t === tab;
      t.setAttribute("aria-selected", on ? "true" : "false");
      t.setAttribute("aria-pressed", on ? "true" : "false");
      t.tabIndex = on ? 0 : -1;
      document.getElementById(t.getAttribute("aria-controls")).hidden = !on;
    });
    if (focus) tab.focus();
  }
  tabs.forEach(function (tab, i) {
    tab.addEventListener("click", function () { openTab(tab, false); });
    tab.addEventListener("keydown", function (event) {
      const step = {ArrowRight: 1, ArrowLeft: -1}[event.key];
      if (step) { event.preventDefault(); openTab(tabs[(i + step + tabs.length) % tabs.length], true); }
    });
  });

  function chosen(selectId) {
    const select = document.getElementById(selectId);
    if (!select || !select.value) return null;
    const option = select.selectedOptions[0];
    return {name: select.value, status: option.dataset.status, version: option.dataset.version, precision: option.dataset.precision};
  }

  function el(tag, className, text) {
    const node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined) node.textContent = text;
    return node;
  }

  // Label bars with scores: [{label, score}] -> <ol class="pg-bars">.
  function bars(predictions, differs) {
    const list = el("ol", "pg-bars");
    predictions.forEach(function (p) {
      const item = el("li", "pg-bar" + (differs && differs.has(p.label) ? " differs" : ""));
      item.dataset.label = p.label;
      const pct = Math.max(0, Math.min(100, p.score * 100));
      item.appendChild(el("span", "pg-label", p.label));
      const track = el("span", "pg-track");
      const fill = el("span", "pg-fill");
      fill.style.width = pct.toFixed(1) + "%";
      track.appendChild(fill);
      item.appendChild(track);
      item.appendChild(el("span", "pg-score", pct.toFixed(1) + "%"));
      if (differs && differs.has(p.label)) item.title = "not in the other deployment's top-k";
      list.appendChild(item);
    });
    return list;
  }

  function ms(value) { return (value < 10 ? value.toFixed(1) : Math.round(value)) + " ms"; }

  window.LantauPlayground = {
    base: base, root: root, v1: v1, describe: describe, showError: showError, shq: shq, pyValue: pyValue,
    pyString: pyString, setCode: setCode, chosen: chosen, el: el, bars: bars, ms: ms,
    chosenName: root.dataset.chosen,
  };
})();
