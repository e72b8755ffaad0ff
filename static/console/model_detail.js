// Model page: the latency/agreement trade-off plot, and job rows updated live over a websocket.
(function () {
  const points = JSON.parse(document.getElementById("tradeoff-points").textContent);
  const plot = document.getElementById("tradeoff");
  if (window.Plotly && plot) {
    if (!points.length) {
      plot.textContent = "Run a quantization or benchmark job to see latency against agreement here.";
    } else {
      // Sizes in MiB, as in the versions table. The plot follows its card's width (responsive) and keeps
      // its labels inside: padded axis ranges and cliponaxis off, so a point at an edge keeps its label.
      // Tuning jobs add their tried configurations (p.trial): open markers, the kept one a star.
      const all = points, tried = all.filter(p => p.trial);
      const versions = all.filter(p => !p.trial);
      const xs = all.map(p => p.latency), ys = all.map(p => 100 * p.agreement);
      const xMax = Math.max(...xs), yMin = Math.min(...ys), yMax = Math.max(...ys);
      const ySpan = Math.max(yMax - yMin, 2);
      const maxSize = Math.max(...all.map(q => q.size_mib));
      const trials = {
        x: tried.map(p => p.latency), y: tried.map(p => 100 * p.agreement), name: "tried configurations",
        text: tried.map(p => p.label + (p.chosen ? " (kept)" : "") + (p.met ? ", met the target" : ", missed the target")),
        mode: "markers", hoverinfo: "text+x+y", cliponaxis: false,
        marker: {size: tried.map(p => p.chosen ? 20 : 11), symbol: tried.map(p => p.chosen ? "star" : "circle-open"),
                 color: tried.map(p => p.met ? "#15803d" : "#b42318"), line: {width: 2}},
      };
      Plotly.newPlot(plot, [{
        x: versions.map(p => p.latency), y: versions.map(p => 100 * p.agreement), name: "versions",
        text: versions.map(p => p.label + " (" + p.precision + ", " + p.size_mib.toFixed(1) + " MiB)"),
        mode: "markers+text", textposition: "top center", hoverinfo: "text+x+y", cliponaxis: false,
        marker: {size: versions.map(p => 12 + 24 * Math.sqrt(p.size_mib / maxSize)),
                 color: versions.map(p => ({fp32: "#0e7490", fp16: "#7c3aed", int8: "#ea580c"})[p.precision] || "#667085"), opacity: 0.8},
      }].concat(tried.length ? [trials] : []), {
        showlegend: tried.length > 0, legend: {orientation: "h", y: -0.25},
        autosize: true, margin: {t: 30, r: 30, b: 50, l: 55},
        xaxis: {title: {text: "p50 at batch 8 (ms), lower is better"}, range: [0, xMax * 1.25 || 1], automargin: true},
        yaxis: {title: {text: "agreement (%)"}, range: [yMin - 0.35 * ySpan, yMax + 0.35 * ySpan], automargin: true},
      }, {displayModeBar: false, responsive: true});
    }
  }

  const table = document.getElementById("jobs");
  const logBox = document.getElementById("job-log");
  if (!table || !window.WebSocket) return;
  const scheme = location.protocol === "https:" ? "wss://" : "ws://";
  function update(msg) {
    // Only this model's jobs have rows. The socket also replays the team's recent jobs on every connect
    // (back-fill), so a job that had already ended when the page was drawn must not reload it again.
    const row = table.querySelector('tr[data-job="' + msg.id + '"]');
    if (!row) return;
    const pill = row.querySelector(".job-status");
    const wasActive = ["queued", "running"].includes(pill.textContent.trim());
    pill.textContent = msg.status; pill.className = "pill job-status " + msg.status;
    row.querySelector(".job-progress").value = msg.progress;
    row.querySelector(".job-message").textContent = msg.message;
    if (msg.error) row.querySelector(".job-result").textContent = msg.error;
    if (msg.log) { logBox.hidden = false; logBox.textContent += "#" + msg.id + " " + msg.log + "\n"; }
    if (msg.status === "succeeded" && wasActive && !row.dataset.reloaded) {
      row.dataset.reloaded = "1";
      setTimeout(function () { location.reload(); }, 800);  // show the new version and its figures
    }
  }
  function connect() {
    const socket = new WebSocket(scheme + location.host + "/ws/jobs/");
    socket.onmessage = function (event) { update(JSON.parse(event.data)); };
    socket.onclose = function () { setTimeout(connect, 2000); };
  }
  connect();
})();
