// Deployment page, live: charts from the replicas' per-second summaries (metrics websocket) over a
// chosen time range, and the status badge and replica table from the team's deployment status pushes.
(function () {
  const name = JSON.parse(document.getElementById("deployment-name").textContent);
  const state = document.getElementById("live-state");
  const KEEP = 900;  // 15 minutes of per-second points, the longest range offered
  const STYLE = {  // distinct colour, dash and legend rank: p95 must not hide under p99
    p50: {color: "#0e7490", dash: "solid", rank: 1}, p95: {color: "#ea580c", dash: "dash", rank: 2},
    p99: {color: "#b42318", dash: "dot", rank: 3}, "requests/s": {color: "#0e7490", dash: "solid", rank: 1},
    errors: {color: "#b42318", dash: "dot", rank: 2}, "mean batch": {color: "#7c3aed", dash: "solid", rank: 1},
    "queue depth": {color: "#ea580c", dash: "dash", rank: 2},
  };
  let rangeS = 300;
  const series = {};  // "<chart>|<trace>" -> index in that chart
  const started = {};  // chart -> true once it has a point
  const charts = {latency: "chart-latency", throughput: "chart-throughput", queue: "chart-queue"};

  function xrange() { const now = Date.now(); return [new Date(now - rangeS * 1000), new Date(now)]; }
  function waiting(text) {
    return [{text: text, showarrow: false, xref: "paper", yref: "paper", x: 0.5, y: 0.5, font: {color: "#667085", size: 14}}];
  }
  Object.entries(charts).forEach(function ([chart, id]) {
    Plotly.newPlot(id, [], {
      margin: {t: 10, r: 10, b: 30, l: 45}, height: 220, legend: {orientation: "h", y: -0.25, traceorder: "normal"},
      xaxis: {type: "date", range: xrange()}, yaxis: {rangemode: "tozero", range: [0, 1]},
      annotations: waiting(chart === "latency" ? "Waiting for traffic…" : "Waiting for the replicas' figures…"),
    }, {displayModeBar: false, responsive: true});
  });

  function push(chart, trace, x, y) {
    const key = chart + "|" + trace;
    const id = charts[chart];
    if (!(key in series)) {
      const style = STYLE[trace.split(" r")[0]] || {color: "#667085", dash: "solid", rank: 9};
      series[key] = document.getElementById(id).data.length;
      Plotly.addTraces(id, {x: [], y: [], name: trace, mode: "lines", legendrank: style.rank,
                            line: {width: 2, color: style.color, dash: style.dash}});
    }
    Plotly.extendTraces(id, {x: [[x]], y: [[y]]}, [series[key]], KEEP);
    if (!started[chart]) {
      started[chart] = true;
      Plotly.relayout(id, {annotations: [], "yaxis.autorange": true});
    }
  }

  function follow() {  // slide every chart's window to end now
    Object.values(charts).forEach(id => Plotly.relayout(id, {"xaxis.range": xrange()}));
  }

  document.querySelectorAll("#chart-range button").forEach(function (button) {
    button.addEventListener("click", function () {
      rangeS = Number(button.dataset.range);
      document.querySelectorAll("#chart-range button").forEach(b => b.setAttribute("aria-pressed", b === button ? "true" : "false"));
      follow();
    });
  });

  function onSummary(m) {
    const x = new Date(m.ts * 1000);
    const suffix = m.replica ? " r" + m.replica : "";
    if (m.requests > 0) {
      ["p50", "p95", "p99"].forEach(p => push("latency", p + suffix, x, m.latency_ms[p]));
    }
    push("throughput", "requests/s" + suffix, x, m.requests_per_s);
    if (m.errors) push("throughput", "errors" + suffix, x, m.errors);
    push("queue", "mean batch" + suffix, x, m.mean_batch_size);
    push("queue", "queue depth" + suffix, x, m.queue_depth);
    state.textContent = "Live: last update " + x.toLocaleTimeString() + " (" + m.model_version + ")";
  }

  // Status badge and replica rows: the same pushes that drive the deployments list.
  const badge = document.getElementById("deployment-status");
  const replicas = document.getElementById("replicas");
  function pill(text) {
    const span = document.createElement("span");
    span.className = "pill " + text; span.textContent = text;
    return span;
  }
  function onStatus(msg) {
    if (msg.deployment !== name) return;
    if (badge) { badge.className = "pill " + msg.status; badge.textContent = msg.status; }
    if (!replicas) return;
    const body = replicas.tBodies[0];
    const seen = new Set();
    msg.replicas.forEach(function (r) {
      seen.add(String(r.id));
      let row = body.querySelector('tr[data-replica="' + r.id + '"]');
      if (!row) {  // a new replica: the cells the push carries; the rest fill in on the next reload
        row = document.createElement("tr"); row.dataset.replica = r.id;
        ["r" + r.id, r.node || "", "", "", "", ""].forEach(function (text) {
          const td = document.createElement("td"); td.textContent = text; row.appendChild(td);
        });
        row.cells[4].className = "state";
        body.appendChild(row);
      }
      row.cells[1].textContent = r.node || "";
      const cell = row.querySelector("td.state");
      cell.innerHTML = ""; cell.appendChild(pill(r.state));
    });
    body.querySelectorAll("tr[data-replica]").forEach(function (row) {
      if (!seen.has(row.dataset.replica)) row.remove();
    });
    const none = body.querySelector("tr.empty");
    if (none) none.hidden = msg.replicas.length > 0;
  }

  const scheme = location.protocol === "https:" ? "wss://" : "ws://";
  function connect(path, handle) {
    const socket = new WebSocket(scheme + location.host + path);
    socket.onmessage = e => handle(JSON.parse(e.data));
    socket.onclose = () => setTimeout(() => connect(path, handle), 2000);
  }
  connect("/ws/deployments/" + name + "/metrics/", onSummary);
  if (window.WebSocket) connect("/ws/deployments/", onStatus);
  setInterval(follow, 1000);
})();
