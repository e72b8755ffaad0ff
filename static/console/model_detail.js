// Model page: the latency/agreement trade-off plot, and job rows updated live over a websocket.
(function () {
  const points = JSON.parse(document.getElementById("tradeoff-points").textContent);
  const plot = document.getElementById("tradeoff");
  if (window.Plotly && plot) {
    if (!points.length) {
      plot.textContent = "Run a quantization or benchmark job to see latency against agreement here.";
    } else {
      Plotly.newPlot(plot, [{
        x: points.map(p => p.latency), y: points.map(p => 100 * p.agreement),
        text: points.map(p => p.label + " (" + p.precision + ", " + p.size_mb.toFixed(1) + " MB)"),
        mode: "markers+text", textposition: "top center", hoverinfo: "text+x+y",
        marker: {size: points.map(p => 12 + 30 * Math.sqrt(p.size_mb / Math.max(...points.map(q => q.size_mb)))),
                 color: points.map(p => ({fp32: "#0e7490", fp16: "#7c3aed", int8: "#ea580c"})[p.precision] || "#667085"), opacity: 0.8},
      }], {
        margin: {t: 20, r: 20, b: 50, l: 60},
        xaxis: {title: {text: "p50 latency at batch 8 (ms), lower is better"}, rangemode: "tozero"},
        yaxis: {title: {text: "agreement with parent (%)"}},
      }, {displayModeBar: false, responsive: true});
    }
  }

  const table = document.getElementById("jobs");
  const logBox = document.getElementById("job-log");
  if (!table || !window.WebSocket) return;
  const scheme = location.protocol === "https:" ? "wss://" : "ws://";
  function update(msg) {
    const row = table.querySelector('tr[data-job="' + msg.id + '"]');
    if (!row) { if (msg.status === "succeeded") location.reload(); return; }
    const pill = row.querySelector(".job-status");
    pill.textContent = msg.status; pill.className = "pill job-status " + msg.status;
    row.querySelector(".job-progress").value = msg.progress;
    row.querySelector(".job-message").textContent = msg.message;
    if (msg.error) row.querySelector(".job-result").textContent = msg.error;
    if (msg.log) { logBox.hidden = false; logBox.textContent += "#" + msg.id + " " + msg.log + "\n"; }
    if (msg.status === "succeeded" && !row.dataset.reloaded) {
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
