// Text playgrounds: embeddings (a few sentences in, their cosine similarity matrix out as a heat-map
// table) and text classification (labels as bars per text).
(function () {
  const P = window.LantauPlayground;
  if (!P) return;

  function lines(id) {
    return document.getElementById(id).value.split("\n").map(s => s.trim()).filter(s => s.length);
  }

  function cosine(a, b) {
    let dot = 0, na = 0, nb = 0;
    for (let i = 0; i < a.length; i++) { dot += a[i] * b[i]; na += a[i] * a[i]; nb += b[i] * b[i]; }
    return na && nb ? dot / Math.sqrt(na * nb) : 0;
  }

  function shortText(text) { return text.length > 40 ? text.slice(0, 38) + "…" : text; }

  // -- embeddings -------------------------------------------------------------------------------
  const embedSelect = document.getElementById("pg-embed-deployment");
  function embedCode(body) {
    const curl = "curl -s " + P.shq(P.base + "/v1/embeddings") + " \\\n" +
      "  -H \"Authorization: Bearer $LANTAU_API_KEY\" \\\n" +
      "  -H 'Content-Type: application/json' \\\n" +
      "  -d " + P.shq(JSON.stringify(body));
    const python = "import os\n\nimport numpy as np\nfrom openai import OpenAI  # pip install openai\n\n" +
      "client = OpenAI(base_url=" + P.pyString(P.base + "/v1") + ", api_key=os.environ[\"LANTAU_API_KEY\"])\n" +
      "texts = " + P.pyValue(body.input, 0) + "\n" +
      "result = client.embeddings.create(model=" + P.pyString(body.model) + ", input=texts)\n" +
      "vectors = np.array([d.embedding for d in result.data])\n" +
      "vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)\n" +
      "print(np.round(vectors @ vectors.T, 3))  # cosine similarity matrix\n";
    P.setCode("embed", curl, python);
  }

  function heat(value) {  // -1..1 -> white..teal
    const t = Math.max(0, Math.min(1, (value + 1) / 2));
    const mix = (a, b) => Math.round(a + (b - a) * t * t);
    return "rgb(" + mix(255, 14) + "," + mix(255, 116) + "," + mix(255, 144) + ")";
  }

  function matrixTable(texts, vectors) {
    const table = P.el("table", "pg-matrix");
    table.id = "pg-embed-matrix";
    const caption = P.el("caption", "muted", "Cosine similarity between the sentences (1 = same direction).");
    table.appendChild(caption);
    const head = P.el("tr");
    head.appendChild(P.el("th", "", ""));
    texts.forEach((t, i) => { const th = P.el("th", "", (i + 1) + ". " + shortText(t)); th.title = t; th.scope = "col"; head.appendChild(th); });
    table.appendChild(P.el("thead")).appendChild(head);
    const tbody = table.appendChild(P.el("tbody"));
    vectors.forEach(function (a, i) {
      const row = P.el("tr");
      const th = P.el("th", "", (i + 1) + ". " + shortText(texts[i]));
      th.scope = "row"; th.title = texts[i];
      row.appendChild(th);
      vectors.forEach(function (b, j) {
        const value = cosine(a, b);
        const td = P.el("td", "pg-cell", value.toFixed(3));
        td.style.background = heat(value);
        if (value > 0.6) td.style.color = "#fff";
        td.dataset.i = i; td.dataset.j = j;
        row.appendChild(td);
      });
      tbody.appendChild(row);
    });
    const wrap = P.el("div", "table-wrap");
    wrap.appendChild(table);
    return wrap;
  }

  if (embedSelect) {
    const run = document.getElementById("pg-embed-run");
    const out = document.getElementById("pg-embed-results");
    const body = () => ({model: embedSelect.value, input: lines("pg-embed-input")});
    run.addEventListener("click", async function () {
      const request = body();
      embedCode(request);
      P.showError("pg-embed-error", null);
      if (!request.input.length) { P.showError("pg-embed-error", new Error("type at least one sentence")); return; }
      run.disabled = true;
      const started = performance.now();
      try {
        const response = await P.v1("/v1/embeddings", {method: "POST", headers: {"Content-Type": "application/json"}, body: JSON.stringify(request)});
        const result = await response.json();
        const vectors = result.data.sort((x, y) => x.index - y.index).map(d => d.embedding);
        const note = P.el("p", "pg-timing muted", vectors.length + " vectors of " + vectors[0].length + " dimensions · " +
          (result.usage ? result.usage.prompt_tokens + " tokens · " : "") + "round trip " + P.ms(performance.now() - started));
        out.replaceChildren(matrixTable(request.input, vectors), note);
      } catch (error) {
        P.showError("pg-embed-error", error);
      } finally { run.disabled = false; }
    });
    embedSelect.addEventListener("change", () => embedCode(body()));
    document.getElementById("pg-embed-input").addEventListener("change", () => embedCode(body()));
    embedCode(body());
  }

  // -- text classification ----------------------------------------------------------------------
  const clsSelect = document.getElementById("pg-textcls-deployment");
  function clsCode(request) {
    const url = P.base + "/v1/deployments/" + request.name + "/predict";
    const curl = "curl -s " + P.shq(url) + " \\\n" +
      "  -H \"Authorization: Bearer $LANTAU_API_KEY\" \\\n" +
      "  -H 'Content-Type: application/json' \\\n" +
      "  -d " + P.shq(JSON.stringify({inputs: request.inputs}));
    const python = "# The OpenAI client has no classification call: this is plain HTTP (pip install httpx).\n" +
      "import os\n\nimport httpx\n\n" +
      "texts = " + P.pyValue(request.inputs, 0) + "\n" +
      "response = httpx.post(\n    " + P.pyString(url) + ",\n" +
      "    json={\"inputs\": texts},\n" +
      "    headers={\"Authorization\": f\"Bearer {os.environ['LANTAU_API_KEY']}\"},\n)\n" +
      "response.raise_for_status()\n" +
      "for text, predictions in zip(texts, response.json()[\"predictions\"]):\n" +
      "    print(text, \"->\", predictions[0][\"label\"], round(predictions[0][\"score\"], 3))\n";
    P.setCode("textcls", curl, python);
  }
  if (clsSelect) {
    const run = document.getElementById("pg-textcls-run");
    const out = document.getElementById("pg-textcls-results");
    const request = () => ({name: clsSelect.value, inputs: lines("pg-textcls-input")});
    run.addEventListener("click", async function () {
      const r = request();
      clsCode(r);
      P.showError("pg-textcls-error", null);
      if (!r.inputs.length) { P.showError("pg-textcls-error", new Error("type at least one text")); return; }
      run.disabled = true;
      try {
        const response = await P.v1("/v1/deployments/" + encodeURIComponent(r.name) + "/predict", {
          method: "POST", headers: {"Content-Type": "application/json"}, body: JSON.stringify({inputs: r.inputs}),
        });
        const result = await response.json();
        const per = result.predictions.length && Array.isArray(result.predictions[0]) ? result.predictions : [result.predictions];
        out.replaceChildren(...per.map(function (predictions, i) {
          const box = P.el("div", "pg-result card");
          box.appendChild(P.el("h3", "", r.inputs[i]));
          box.appendChild(P.bars(predictions));
          return box;
        }));
        const t = result.timing_ms;
        if (t) out.appendChild(P.el("p", "pg-timing muted", "queue " + P.ms(t.queue) + " · inference " + P.ms(t.inference) + " · total " + P.ms(t.total)));
      } catch (error) {
        P.showError("pg-textcls-error", error);
      } finally { run.disabled = false; }
    });
    clsSelect.addEventListener("change", () => clsCode(request()));
    clsCode(request());
  }
})();
