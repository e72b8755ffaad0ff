// Chat playground: /v1/chat/completions with stream=true, tokens drawn as their Server-Sent Events arrive;
// system prompt, temperature, top-p, max tokens and stop; time to first token and tokens/s under each
// answer; the conversation is kept (in this tab's sessionStorage) until cleared.
(function () {
  const P = window.LantauPlayground;
  if (!P || !document.getElementById("pg-chat-deployment")) return;
  const log = document.getElementById("pg-chat-log");
  const form = document.getElementById("pg-chat-form");
  const input = document.getElementById("pg-chat-input");
  const send = document.getElementById("pg-chat-send");
  const abort = document.getElementById("pg-chat-abort");
  const select = document.getElementById("pg-chat-deployment");
  let messages = [];
  let controller = null;

  function storeKey() { return "lantau-playground-chat:" + select.value; }
  function save() { try { sessionStorage.setItem(storeKey(), JSON.stringify(messages)); } catch (e) { /* private mode */ } }
  function load() {
    try { messages = JSON.parse(sessionStorage.getItem(storeKey()) || "[]"); } catch (e) { messages = []; }
    log.replaceChildren();
    if (!messages.length) log.appendChild(P.el("p", "muted pg-chat-empty", "No messages yet."));
    messages.forEach(m => bubble(m.role, m.content, m.stats));
  }

  function bubble(role, text, stats) {
    log.querySelectorAll(".pg-chat-empty").forEach(n => n.remove());
    const box = P.el("div", "pg-msg " + role);
    box.appendChild(P.el("span", "pg-role", role === "user" ? "You" : "Assistant"));
    const body = P.el("div", "pg-msg-text", text || "");
    box.appendChild(body);
    const foot = P.el("div", "pg-msg-stats muted", stats || "");
    box.appendChild(foot);
    log.appendChild(box);
    log.scrollTop = log.scrollHeight;
    return {box: box, body: body, foot: foot};
  }

  function number(id) {
    const value = parseFloat(document.getElementById(id).value);
    return Number.isFinite(value) ? value : undefined;
  }

  function request(history) {
    const system = document.getElementById("pg-chat-system").value.trim();
    const stops = document.getElementById("pg-chat-stop").value.split("\n").filter(s => s.length);
    const body = {model: select.value, messages: (system ? [{role: "system", content: system}] : []).concat(history)};
    const temperature = number("pg-chat-temperature"), topP = number("pg-chat-top-p"), maxTokens = number("pg-chat-max-tokens");
    if (temperature !== undefined) body.temperature = temperature;
    if (topP !== undefined) body.top_p = topP;
    if (maxTokens !== undefined) body.max_tokens = Math.round(maxTokens);
    if (stops.length) body.stop = stops;
    body.stream = true;
    body.stream_options = {include_usage: true};
    return body;
  }

  function showCode(body) {
    const curl = "curl -sN " + P.shq(P.base + "/v1/chat/completions") + " \\\n" +
      "  -H \"Authorization: Bearer $LANTAU_API_KEY\" \\\n" +
      "  -H 'Content-Type: application/json' \\\n" +
      "  -d " + P.shq(JSON.stringify(body));
    const args = Object.keys(body).filter(k => !["model", "messages", "stream", "stream_options"].includes(k));
    const python = "import os\n\nfrom openai import OpenAI  # pip install openai\n\n" +
      "client = OpenAI(base_url=" + P.pyString(P.base + "/v1") + ", api_key=os.environ[\"LANTAU_API_KEY\"])\n" +
      "stream = client.chat.completions.create(\n" +
      "    model=" + P.pyString(body.model) + ",\n" +
      "    messages=" + P.pyValue(body.messages, 4) + ",\n" +
      args.map(k => "    " + k + "=" + P.pyValue(body[k], 4) + ",\n").join("") +
      "    stream=True,\n)\n" +
      "for chunk in stream:\n" +
      "    if chunk.choices:\n" +
      "        print(chunk.choices[0].delta.content or \"\", end=\"\", flush=True)\n" +
      "print()\n";
    P.setCode("chat", curl, python);
  }

  // Read the SSE body, calling onEvent(parsed JSON) per "data:" line until [DONE].
  async function readEvents(response, onEvent) {
    const reader = response.body.getReader();
    const decoder = new TextDecoder();
    let buffer = "";
    for (;;) {
      const {value, done} = await reader.read();
      if (done) return;
      buffer += decoder.decode(value, {stream: true});
      let cut;
      while ((cut = buffer.indexOf("\n\n")) >= 0) {
        const event = buffer.slice(0, cut);
        buffer = buffer.slice(cut + 2);
        for (const line of event.split("\n")) {
          if (!line.startsWith("data:")) continue;
          const data = line.slice(5).trim();
          if (data === "[DONE]") return;
          onEvent(JSON.parse(data));
        }
      }
    }
  }

  function stats(tFirst, tLast, started, tokens) {
    if (tFirst === null) return "no tokens";
    const span = (tLast - tFirst) / 1000;
    const rate = tokens > 1 && span > 0 ? (tokens - 1) / span : tokens / Math.max((tLast - started) / 1000, 1e-3);
    return "time to first token " + P.ms(tFirst - started) + " · " + rate.toFixed(1) + " tokens/s · " + tokens + " tokens";
  }

  async function ask(text) {
    messages.push({role: "user", content: text});
    bubble("user", text);
    save();
    const body = request(messages.map(m => ({role: m.role, content: m.content})));
    showCode(body);
    const answer = bubble("assistant", "");
    answer.box.classList.add("streaming");
    controller = new AbortController();
    send.disabled = true; abort.hidden = false;
    P.showError("pg-chat-error", null);
    const started = performance.now();
    let tFirst = null, tLast = null, pieces = 0, usage = null, finish = null;
    try {
      const response = await P.v1("/v1/chat/completions", {
        method: "POST", headers: {"Content-Type": "application/json"}, body: JSON.stringify(body), signal: controller.signal,
      });
      await readEvents(response, function (chunk) {
        if (chunk.error) throw new Error(chunk.error.message || "the stream failed");
        if (chunk.usage) usage = chunk.usage;
        const choice = (chunk.choices || [])[0];
        if (!choice) return;
        if (choice.finish_reason) finish = choice.finish_reason;
        const piece = choice.delta && choice.delta.content;
        if (!piece) return;
        tLast = performance.now();
        if (tFirst === null) tFirst = tLast;
        pieces += 1;
        answer.body.appendChild(document.createTextNode(piece));  // one text node per token: drawn as it comes
        log.scrollTop = log.scrollHeight;
      });
    } catch (error) {
      P.showError("pg-chat-error", error);
    } finally {
      const tokens = usage ? usage.completion_tokens : pieces;
      const line = stats(tFirst, tLast, started, tokens) + (finish ? " · finished: " + finish : "");
      answer.foot.textContent = line;
      answer.box.classList.remove("streaming");
      const content = answer.body.textContent;
      if (content) { messages.push({role: "assistant", content: content, stats: line}); save(); }
      controller = null;
      send.disabled = false; abort.hidden = true;
    }
  }

  form.addEventListener("submit", function (event) {
    event.preventDefault();
    const text = input.value.trim();
    if (!text || controller) return;
    input.value = "";
    ask(text);
  });
  input.addEventListener("keydown", function (event) {
    if (event.key === "Enter" && !event.shiftKey && !event.isComposing) { event.preventDefault(); form.requestSubmit(); }
  });
  abort.addEventListener("click", function () { if (controller) controller.abort(); });
  document.getElementById("pg-chat-clear").addEventListener("click", function () {
    if (controller) controller.abort();
    messages = []; save(); load();
    P.showError("pg-chat-error", null);
  });
  select.addEventListener("change", function () { load(); showCode(request(messages)); });
  load();
  showCode(request(messages.length ? messages.map(m => ({role: m.role, content: m.content})) : [{role: "user", content: "Hello!"}]));
})();
