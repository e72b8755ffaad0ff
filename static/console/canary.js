// The canary table on a deployment page: both versions' figures from the management API every 5 s.
(function () {
  const table = document.getElementById("canary-figures");
  const name = JSON.parse(document.getElementById("deployment-name").textContent);
  if (!table) return;
  function text(value, digits) { return value === null || value === undefined ? "–" : Number(value).toFixed(digits); }
  function refresh() {
    fetch("/api/v1/deployments/" + encodeURIComponent(name), {credentials: "same-origin"})
      .then(function (response) { return response.ok ? response.json() : null; })
      .then(function (body) {
        if (!body || !body.canary) return;
        ["stable", "canary"].forEach(function (side) {
          const row = table.querySelector('tr[data-side="' + side + '"]'), f = body.canary[side];
          if (!row || !f) return;
          row.querySelector(".reporting").textContent = f.reporting + " / " + f.replicas;
          row.querySelector(".rps").textContent = text(f.requests_per_s, 1);
          row.querySelector(".errors").textContent = f.error_rate === null ? "–" : Math.round(f.error_rate * 100) + "%";
          row.querySelector(".p50").textContent = text(f.latency_ms_p50, 3);
          row.querySelector(".p95").textContent = text(f.latency_ms_p95, 3);
        });
      })
      .catch(function () { /* the next refresh tries again */ });
  }
  setInterval(refresh, 5000);
})();
