// Overview, live: every few seconds the team's traffic per region and the nodes' figures; deployment and
// job pushes update "needs attention" and the recent jobs as they happen.
(function () {
  const GIB = 1024 * 1024 * 1024;
  function gib(v) { return v === null || v === undefined ? "–" : (v / GIB).toFixed(1); }
  function set(cell, text) { if (cell && cell.textContent !== text) cell.textContent = text; }
  function pill(text) {
    const span = document.createElement("span"); span.className = "pill " + text; span.textContent = text; return span;
  }

  function onTick(msg) {
    msg.regions.forEach(function (r) {
      const row = document.querySelector('#regions tr[data-region="' + r.region + '"]');
      if (!row) return;
      set(row.querySelector(".rps"), r.requests_per_s.toFixed(1));
      set(row.querySelector(".p95"), r.p95_ms === null ? "–" : r.p95_ms.toFixed(1) + " ms");
      set(row.querySelector(".errors"), r.error_rate === null ? "–" : Math.round(r.error_rate * 100) + "%");
    });
    msg.nodes.forEach(function (n) {
      const row = document.querySelector('#overview-nodes tr[data-node="' + n.node + '"]');
      if (!row) return;
      const state = row.querySelector(".state .pill");
      if (state && state.textContent !== n.status) { state.className = "pill " + n.status; state.textContent = n.status; }
      set(row.querySelector(".cpu"), n.cpu_percent === null ? "–" : Math.round(n.cpu_percent) + "%");
      set(row.querySelector(".memory"), gib(n.memory_used) + " / " + gib(n.memory_total) + " GiB");
      const cell = row.querySelector(".gpus");
      if (!n.gpus.length) { set(cell, "–"); return; }
      cell.innerHTML = "";
      n.gpus.forEach(function (g) {
        const pct = Math.round(g.utilization || 0);
        const box = document.createElement("div"); box.className = "gpu";
        const label = document.createElement("span");
        label.textContent = "GPU " + g.index + " · " + pct + "% · " + gib(g.memory_used) + " / " + gib(g.memory_total) + " GiB";
        const meter = document.createElement("meter"); meter.min = 0; meter.max = 100; meter.value = pct;
        meter.setAttribute("aria-label", "GPU " + g.index + " utilisation");
        box.appendChild(label); box.appendChild(meter); cell.appendChild(box);
      });
    });
  }

  function onStatus(msg) {
    const card = document.querySelector('#attention .attention[data-deployment="' + msg.deployment + '"]');
    if (!card) return;  // a deployment that turns bad shows up on the next reload with its reasons
    const old = card.querySelector(".pill");
    old.replaceWith(pill(msg.status));
    // Ready but running outside its region still needs attention (the reasons say where and why).
    card.classList.toggle("resolved", (msg.status === "ready" && !card.dataset.elsewhere) || msg.status === "paused");
  }

  function onJob(msg) {
    const row = document.querySelector('#recent-jobs tr[data-job="' + msg.id + '"]');
    if (!row) return;
    const cell = row.querySelector(".status"); cell.innerHTML = ""; cell.appendChild(pill(msg.status));
    row.querySelector("progress").value = msg.progress;
    set(row.querySelector(".message"), msg.error || msg.message);
  }

  LantauLive.open("/ws/overview/", {
    status: "overview-connection",
    onMessage: function (msg) {
      if (msg.type === "overview.tick") onTick(msg);
      else if (msg.type === "deployment.status") onStatus(msg);
      else if (msg.type === "job.update") onJob(msg);
    },
  });
})();
