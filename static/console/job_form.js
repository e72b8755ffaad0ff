// "Start a job": the options form is generated from the chosen kind's JSON schema (enums as selects,
// booleans as checkboxes, numbers with their bounds, lists as comma-separated text), prefilled with the
// recommended values for the version's task; "Edit as JSON" shows the same options as raw JSON.
(function () {
  const form = document.getElementById("job-form");
  if (!form) return;
  const kinds = JSON.parse(document.getElementById("kind-forms").textContent);
  const kindSelect = form.querySelector("select[name=kind]");
  const versionSelect = form.querySelector("select[name=version_id]");
  const fields = document.getElementById("options-fields");
  const raw = form.querySelector("textarea[name=options]");
  const rawToggle = document.getElementById("raw-toggle");
  const problem = document.getElementById("options-error");
  const help = document.getElementById("kind-help");

  function resolve(schema, root) {
    if (schema && schema.$ref) return (root.$defs || {})[schema.$ref.split("/").pop()] || {};
    return schema || {};
  }
  function describe(prop, root) {
    let s = resolve(prop, root), nullable = false;
    if (s.anyOf) {
      const kinds = s.anyOf.filter(x => x.type !== "null");
      nullable = kinds.length < s.anyOf.length;
      s = resolve(kinds[0], root);
    }
    const type = s.type || (s.enum ? (typeof s.enum[0] === "number" ? "integer" : "string") : "string");
    let min = s.minimum, max = s.maximum;
    if (s.exclusiveMinimum !== undefined) min = s.exclusiveMinimum + (type === "integer" ? 1 : 0);
    if (s.exclusiveMaximum !== undefined) max = s.exclusiveMaximum - (type === "integer" ? 1 : 0);
    const items = s.items ? resolve(s.items, root) : null;
    return {type: type, choices: s.enum, nullable: nullable, min: min, max: max, itemType: items ? items.type : "string"};
  }

  function field(name, prop, schema, initial, recommended) {
    const d = describe(prop, schema);
    const label = document.createElement("label");
    const id = "opt-" + name;
    label.htmlFor = id;
    label.append(prop.title || name);
    let input;
    if (d.choices) {
      input = document.createElement("select");
      if (d.nullable) input.add(new Option("(recommended for the task)", ""));
      d.choices.forEach(c => input.add(new Option(String(c), String(c))));
      input.value = initial === null || initial === undefined ? "" : String(initial);
    } else if (d.type === "boolean") {
      label.className = "check";
      input = document.createElement("input"); input.type = "checkbox";
      input.checked = !!initial;
      input.dataset.unset = initial === null || initial === undefined ? "1" : "";
      input.addEventListener("change", () => { input.dataset.unset = ""; });
    } else if (d.type === "integer" || d.type === "number") {
      input = document.createElement("input"); input.type = "number";
      input.step = d.type === "integer" ? "1" : "any";
      if (d.min !== undefined) input.min = d.min;
      if (d.max !== undefined) input.max = d.max;
      input.value = initial === null || initial === undefined ? "" : initial;
      input.placeholder = d.nullable ? "default" : "";
    } else {
      input = document.createElement("input"); input.type = "text";
      if (d.type === "array") {
        input.value = Array.isArray(initial) ? initial.join(", ") : "";
        input.placeholder = "comma-separated";
      } else input.value = initial === null || initial === undefined ? "" : initial;
    }
    input.id = id;
    input.dataset.option = name; input.dataset.type = d.type; input.dataset.itemType = d.itemType;
    if (d.type === "boolean") label.prepend(input); else label.appendChild(input);
    const small = document.createElement("small");
    small.textContent = (recommended ? "Recommended for this task. " : "") + (prop.description || "");
    label.appendChild(small);
    return label;
  }

  function build(values) {
    const kind = kinds[kindSelect.value];
    fields.innerHTML = "";
    if (!kind) return;
    const option = versionSelect.selectedOptions[0];
    const task = option ? option.dataset.task : "";
    const recommended = (kind.recommended || {})[task] || {};
    const props = kind.schema.properties || {};
    if (!Object.keys(props).length) fields.textContent = "This kind has no options.";
    Object.entries(props).forEach(function ([name, prop]) {
      const initial = values && name in values ? values[name] : (name in recommended ? recommended[name] : prop.default);
      fields.appendChild(field(name, prop, kind.schema, initial, name in recommended));
    });
    help.textContent = kind.needs_onnx && option && option.dataset.format !== "onnx"
      ? "This kind needs an ONNX version: export this one first." : "";
  }

  function collect() {
    const out = {};
    fields.querySelectorAll("[data-option]").forEach(function (input) {
      const name = input.dataset.option, type = input.dataset.type;
      if (type === "boolean") { if (input.dataset.unset !== "1") out[name] = input.checked; return; }
      if (input.value === "") return;
      const number = t => t === "integer" || t === "number";
      if (type === "array") {
        out[name] = input.value.split(",").map(s => s.trim()).filter(Boolean)
          .map(v => number(input.dataset.itemType) ? Number(v) : v);
      } else out[name] = number(type) ? Number(input.value) : input.value;
    });
    return out;
  }

  function showRaw(on) {
    problem.textContent = "";
    if (on) {
      raw.value = JSON.stringify(collect(), null, 2);
    } else {
      let values;
      try { values = raw.value.trim() ? JSON.parse(raw.value) : {}; } catch (e) {
        problem.textContent = "Not valid JSON: " + e.message; rawToggle.checked = true; return;
      }
      build(values);
    }
    raw.hidden = !on; fields.hidden = on;
  }

  kindSelect.addEventListener("change", () => { raw.value = ""; build(null); if (rawToggle.checked) showRaw(true); });
  versionSelect.addEventListener("change", () => { build(null); if (rawToggle.checked) showRaw(true); });
  rawToggle.addEventListener("change", () => showRaw(rawToggle.checked));
  form.addEventListener("submit", function () { if (!rawToggle.checked) raw.value = JSON.stringify(collect()); });

  // After a refused start the server sends back what was typed: keep it.
  let kept = null;
  try { kept = raw.value.trim() ? JSON.parse(raw.value) : null; } catch (e) { rawToggle.checked = true; }
  build(kept);
  showRaw(rawToggle.checked);
})();
