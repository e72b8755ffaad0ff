// Live charts for one deployment: each replica publishes a summary every second; plot the last 5 minutes.
(function () {
  const name = JSON.parse(document.getElementById("deployment-name").textContent);
  const state = document.getElementById("live-state");
  const KEEP = 300;
  const layout = {margin: {t: 10, r: 10, b: 30, l: 45}, height: 220, legend: {orientation: "h", y: -0.25},
                  xaxis: {type: "date"}, yaxis: {rangemode: "tozero"}};
  const series = {};  // "<chart>|<trace>" -> index in that chart
  const charts = {latency: "chart-latency", throughput: "chart-throughput", queue: "chart-queue"};
  Object.values(charts).forEach(id => Plotly.newPlot(id, [], layout, {displayModeBar: false, responsive: true}));

  function push(chart, trace, x, y) {
    const key = chart + "|" + trace;
    const id = charts[chart];
    if (!(key in series)) {
      series[key] = document.getElementById(id).data.length;
      Plotly.addTraces(id, {x: [], y: [], name: trace, mode: "lines", line: {width: 2}});
    }
    Plotly.extendTraces(id, {x: [[x]], y: [[y]]}, [series[key]], KEEP);
  }

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

  const scheme = location.protocol === "https:" ? "wss://" : "ws://";
  function connect() {
    const socket = new WebSocket(scheme + location.host + "/ws/deployments/" + name + "/metrics/");
    socket.onmessage = e => onSummary(JSON.parse(e.data));
    socket.onclose = () => setTimeout(connect, 2000);
  }
  connect();
})();
