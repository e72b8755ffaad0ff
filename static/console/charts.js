// Small Plotly helpers shared by the node and overview pages: time-series charts with an empty state.
window.LantauCharts = (function () {
  const KEEP = 900;
  const COLOURS = ["#0e7490", "#ea580c", "#7c3aed", "#067647", "#b42318", "#667085", "#ca8a04", "#0369a1"];
  function create(id, opts) {
    const el = document.getElementById(id);
    if (!el) return null;
    Plotly.newPlot(el, [], {
      margin: {t: 10, r: 10, b: 30, l: 50}, height: opts.height || 200,
      legend: {orientation: "h", y: -0.3}, xaxis: {type: "date"},
      yaxis: {rangemode: "tozero", title: {text: opts.unit || ""}, range: opts.range || undefined},
      annotations: [{text: opts.empty || "Waiting for the next heartbeat…", showarrow: false, xref: "paper",
                     yref: "paper", x: 0.5, y: 0.5, font: {color: "#667085", size: 14}}],
    }, {displayModeBar: false, responsive: true});
    return {el: el, traces: {}, started: false, fixedRange: !!opts.range, added: 0};
  }
  // Add points: `points` maps a trace name to [x, y] pairs.
  function extend(chart, points) {
    if (!chart) return;
    Object.entries(points).forEach(function ([name, xy]) {
      if (!xy.length) return;
      if (!(name in chart.traces)) {
        chart.traces[name] = chart.el.data.length;
        const colour = COLOURS[chart.traces[name] % COLOURS.length];
        Plotly.addTraces(chart.el, {x: [], y: [], name: name, mode: "lines", line: {width: 2, color: colour}});
      }
      Plotly.extendTraces(chart.el, {x: [xy.map(p => p[0])], y: [xy.map(p => p[1])]}, [chart.traces[name]], KEEP);
      chart.added += xy.length;
    });
    if (!chart.started && Object.keys(chart.traces).length) {
      chart.started = true;
      Plotly.relayout(chart.el, chart.fixedRange ? {annotations: []} : {annotations: [], "yaxis.autorange": true});
    }
  }
  function points(chart) {  // how many points the chart holds (the browser tests read it)
    return chart ? chart.el.data.reduce((n, t) => n + t.x.length, 0) : 0;
  }
  function added(chart) {  // how many points were ever added (a full chart keeps KEEP per trace)
    return chart ? chart.added : 0;
  }
  return {create: create, extend: extend, points: points, added: added};
})();
