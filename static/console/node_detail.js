// Node page, live: CPU, memory and per-GPU charts from the agent's heartbeats (the node's websocket sends
// its recent history first, then each new heartbeat; after a drop it back-fills from the last point held).
(function () {
  const name = JSON.parse(document.getElementById("node-name").textContent);
  const GIB = 1024 * 1024 * 1024;
  const charts = {
    cpu: LantauCharts.create("chart-cpu", {unit: "% (load per core)"}),
    memory: LantauCharts.create("chart-memory", {unit: "GiB"}),
    gpuUtil: LantauCharts.create("chart-gpu-util", {unit: "%", range: [0, 100], empty: "No GPU figures yet"}),
    gpuMemory: LantauCharts.create("chart-gpu-memory", {unit: "GiB", empty: "No GPU figures yet"}),
    gpuTemp: LantauCharts.create("chart-gpu-temp", {unit: "°C", empty: "No GPU figures yet"}),
  };
  const state = document.getElementById("node-live");
  let lastTs = 0;

  function add(items) {
    const fresh = items.filter(i => i.ts > lastTs).sort((a, b) => a.ts - b.ts);
    if (!fresh.length) return;
    lastTs = fresh[fresh.length - 1].ts;
    const cpu = [], used = [], total = [], util = {}, mem = {}, temp = {};
    fresh.forEach(function (m) {
      const x = new Date(m.ts * 1000);
      if (m.cpu_percent !== null) cpu.push([x, m.cpu_percent]);
      if (m.memory_used !== null) used.push([x, m.memory_used / GIB]);
      if (m.memory_total !== null) total.push([x, m.memory_total / GIB]);
      (m.gpus || []).forEach(function (g) {
        const key = "GPU " + g.index;
        if (g.utilization !== null) (util[key] = util[key] || []).push([x, g.utilization]);
        if (g.memory_used !== null) (mem[key + " used"] = mem[key + " used"] || []).push([x, g.memory_used / GIB]);
        if (g.temperature !== null) (temp[key] = temp[key] || []).push([x, g.temperature]);
      });
    });
    LantauCharts.extend(charts.cpu, {"load per core": cpu});
    LantauCharts.extend(charts.memory, {used: used, total: total});
    LantauCharts.extend(charts.gpuUtil, util);
    LantauCharts.extend(charts.gpuMemory, mem);
    LantauCharts.extend(charts.gpuTemp, temp);
    const last = fresh[fresh.length - 1];
    if (state) state.textContent = "Live: last heartbeat " + new Date(last.ts * 1000).toLocaleTimeString();
  }

  LantauLive.open("/ws/nodes/" + name + "/stats/", {
    status: "node-connection",
    since: function () { return lastTs; },
    onMessage: function (msg) {
      if (msg.type === "node.history") add(msg.items);
      else if (msg.type === "node.stats") add([msg]);
    },
  });
  window.lantauNodeCharts = charts;  // for the browser tests: LantauCharts.points(lantauNodeCharts.cpu)
})();
