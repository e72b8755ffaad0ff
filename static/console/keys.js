// API keys page: a copy button for the key shown once, and one small chart per key (requests per day
// over the last 30 days, rolled up from the runners' counters).
(function () {
  const copy = document.getElementById("copy-key");
  if (copy) {
    copy.hidden = false;
    copy.addEventListener("click", function () {
      const text = document.getElementById("new-key-value").textContent.trim();
      const done = function () { copy.textContent = "Copied"; setTimeout(function () { copy.textContent = "Copy"; }, 2000); };
      if (navigator.clipboard && window.isSecureContext) {
        navigator.clipboard.writeText(text).then(done, function () { copy.textContent = "Select and copy the key"; });
      } else {  // plain-http consoles: select the key for Ctrl+C
        const range = document.createRange();
        range.selectNodeContents(document.getElementById("new-key-value"));
        const sel = window.getSelection(); sel.removeAllRanges(); sel.addRange(range);
        copy.textContent = document.execCommand("copy") ? "Copied" : "Selected: press Ctrl+C";
      }
    });
  }
  const data = document.getElementById("key-usage");
  if (!data) return;
  const series = JSON.parse(data.textContent);
  document.querySelectorAll(".sparkline").forEach(function (el) {
    const days = series[el.dataset.key] || [];
    if (!days.length || !window.Plotly) { el.textContent = "–"; return; }
    Plotly.newPlot(el, [{x: days.map(d => d.day), y: days.map(d => d.requests), type: "bar"}],
      {margin: {l: 0, r: 0, t: 0, b: 0}, xaxis: {visible: false}, yaxis: {visible: false}},
      {displayModeBar: false, staticPlot: true});
  });
})();
