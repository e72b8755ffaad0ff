// Image playground: drop, paste, pick or sample an image; top-k bars per deployment; latency split
// (queue / inference / total from the runner's timing_ms, plus the browser's round trip); two deployments
// side by side on the same image with the labels they disagree on highlighted.
(function () {
  const P = window.LantauPlayground;
  const panel = document.getElementById("pg-image");
  if (!P || !panel || !document.getElementById("pg-image-deployment")) return;
  const drop = document.getElementById("pg-drop");
  const fileInput = document.getElementById("pg-file");
  const preview = document.getElementById("pg-preview");
  const run = document.getElementById("pg-image-run");
  const results = document.getElementById("pg-image-results");
  const agreement = document.getElementById("pg-image-agreement");
  const TYPES = ["image/jpeg", "image/png", "image/webp"];
  let image = null;  // {blob, type, filename}

  function topK() {
    const k = parseInt(document.getElementById("pg-image-topk").value, 10);
    return Number.isFinite(k) ? k : 5;
  }

  function setImage(blob, filename) {
    const type = TYPES.includes(blob.type) ? blob.type : (blob.type || "application/octet-stream");
    image = {blob: blob, type: type, filename: (filename || "image.jpg").replace(/[^\w.-]+/g, "_")};
    if (preview.src) URL.revokeObjectURL(preview.src);
    preview.src = URL.createObjectURL(blob);
    preview.hidden = false;
    run.disabled = false;
    P.showError("pg-image-error", null);
    showCode();
  }

  drop.addEventListener("click", function (event) { if (event.target !== fileInput) fileInput.click(); });
  drop.addEventListener("keydown", function (event) {
    if (event.key === "Enter" || event.key === " ") { event.preventDefault(); fileInput.click(); }
  });
  fileInput.addEventListener("change", function () { if (fileInput.files[0]) setImage(fileInput.files[0], fileInput.files[0].name); });
  ["dragenter", "dragover"].forEach(function (name) {
    drop.addEventListener(name, function (event) { event.preventDefault(); drop.classList.add("over"); });
  });
  ["dragleave", "drop"].forEach(function (name) {
    drop.addEventListener(name, function () { drop.classList.remove("over"); });
  });
  drop.addEventListener("drop", function (event) {
    event.preventDefault();
    const file = event.dataTransfer.files[0];
    if (file) setImage(file, file.name);
  });
  document.addEventListener("paste", function (event) {
    if (panel.hidden) return;
    const item = Array.from(event.clipboardData ? event.clipboardData.items : []).find(i => i.type.startsWith("image/"));
    if (item) { setImage(item.getAsFile(), "pasted." + item.type.split("/")[1]); event.preventDefault(); }
  });
  panel.querySelectorAll(".pg-sample").forEach(function (button) {
    button.addEventListener("click", async function () {
      panel.querySelectorAll(".pg-sample").forEach(b => b.setAttribute("aria-pressed", b === button ? "true" : "false"));
      try {
        const response = await fetch(button.dataset.url, {credentials: "same-origin"});
        if (!response.ok) throw new Error("the sample could not be loaded (" + response.status + ")");
        setImage(await response.blob(), button.dataset.name + ".jpg");
      } catch (error) { P.showError("pg-image-error", error); }
    });
  });

  function targets() {
    const a = P.chosen("pg-image-deployment");
    const b = P.chosen("pg-image-compare");
    return b && b.name !== a.name ? [a, b] : [a];
  }

  function showCode() {
    const d = P.chosen("pg-image-deployment");
    const file = image ? image.filename : "cat.jpg";
    const type = image && TYPES.includes(image.type) ? image.type : "image/jpeg";
    const url = P.base + "/v1/deployments/" + d.name + "/predict?top_k=" + topK();
    const curl = "curl -s " + P.shq(url) + " \\\n" +
      "  -H \"Authorization: Bearer $LANTAU_API_KEY\" \\\n" +
      "  -H " + P.shq("Content-Type: " + type) + " \\\n" +
      "  --data-binary @" + P.shq(file);
    const python = "# The OpenAI client has no image-classification call: this is plain HTTP (pip install httpx).\n" +
      "import os\n\nimport httpx\n\n" +
      "with open(" + P.pyString(file) + ", \"rb\") as f:\n" +
      "    response = httpx.post(\n" +
      "        " + P.pyString(url) + ",\n" +
      "        content=f.read(),\n" +
      "        headers={\"Authorization\": f\"Bearer {os.environ['LANTAU_API_KEY']}\", \"Content-Type\": " + P.pyString(type) + "},\n" +
      "    )\n" +
      "response.raise_for_status()\n" +
      "for p in response.json()[\"predictions\"]:\n" +
      "    print(f\"{p['score']:.3f}  {p['label']}\")\n";
    P.setCode("image", curl, python);
  }

  async function classify(d) {
    const started = performance.now();
    const response = await P.v1("/v1/deployments/" + encodeURIComponent(d.name) + "/predict?top_k=" + topK(), {
      method: "POST", headers: {"Content-Type": image.type}, body: image.blob,
    });
    const body = await response.json();
    return {d: d, body: body, roundTrip: performance.now() - started};
  }

  function card(result, differs) {
    const box = P.el("div", "pg-result card");
    box.dataset.deployment = result.d.name;
    const head = P.el("h3", "", result.d.name + " ");
    head.appendChild(P.el("small", "muted", result.body.model_version + " · " + result.d.precision));
    box.appendChild(head);
    box.appendChild(P.bars(result.body.predictions || [], differs));
    const t = result.body.timing_ms || {};
    const timing = P.el("p", "pg-timing muted");
    timing.textContent = "queue " + P.ms(t.queue || 0) + " · inference " + P.ms(t.inference || 0) +
      " · total " + P.ms(t.total || 0) + " · round trip " + P.ms(result.roundTrip);
    box.appendChild(timing);
    return box;
  }

  function compare(done) {
    agreement.hidden = done.length < 2;
    if (done.length < 2) return [null, null];
    const [a, b] = done.map(r => r.body.predictions || []);
    const la = new Set(a.map(p => p.label)), lb = new Set(b.map(p => p.label));
    const onlyA = new Set([...la].filter(l => !lb.has(l))), onlyB = new Set([...lb].filter(l => !la.has(l)));
    const same = a.length && b.length && a[0].label === b[0].label;
    agreement.className = "pg-agreement " + (same ? "agree" : "disagree");
    agreement.textContent = same
      ? "Both say " + a[0].label + ". Top-" + a.length + " labels shared: " + (a.length - onlyA.size) + " of " + a.length + "."
      : "They disagree on the top label: " + done[0].d.name + " says " + (a[0] || {}).label + ", " +
        done[1].d.name + " says " + (b[0] || {}).label + ".";
    if (onlyA.size || onlyB.size) agreement.textContent += " Highlighted: labels only one of them ranks in its top-" + a.length + ".";
    return [onlyA, onlyB];
  }

  run.addEventListener("click", async function () {
    if (!image) return;
    run.disabled = true;
    run.textContent = "Classifying…";
    P.showError("pg-image-error", null);
    showCode();
    try {
      const done = await Promise.all(targets().map(classify));
      const differs = compare(done);
      results.replaceChildren(...done.map((r, i) => card(r, differs[i])));
      results.classList.toggle("two", done.length === 2);
    } catch (error) {
      P.showError("pg-image-error", error);
    } finally {
      run.disabled = false;
      run.textContent = "Classify";
    }
  });
  ["pg-image-deployment", "pg-image-compare", "pg-image-topk"].forEach(id => document.getElementById(id).addEventListener("change", showCode));
  showCode();
})();
