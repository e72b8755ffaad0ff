// Live replica states: the console pushes deployment status over a websocket; update the status cells.
(function () {
  const table = document.getElementById("deployments");
  if (!table || !window.WebSocket) return;
  const scheme = location.protocol === "https:" ? "wss://" : "ws://";
  let socket;
  function connect() {
    socket = new WebSocket(scheme + location.host + "/ws/deployments/");
    socket.onmessage = function (event) {
      const msg = JSON.parse(event.data);
      const row = table.querySelector('tr[data-deployment="' + msg.deployment + '"]');
      if (!row) return;
      const cell = row.querySelector("td.status");
      cell.innerHTML = "";
      // One pill per state with its count, as the page renders it (ready first).
      const order = ["ready", "starting", "pending", "failed"], counts = new Map();
      msg.replicas.forEach(function (r) { counts.set(r.state, (counts.get(r.state) || 0) + 1); });
      const states = [...counts.keys()].sort(function (a, b) {
        const ra = order.indexOf(a) < 0 ? 99 : order.indexOf(a), rb = order.indexOf(b) < 0 ? 99 : order.indexOf(b);
        return ra - rb || a.localeCompare(b);
      });
      (states.length ? states : [msg.status]).forEach(function (state) {
        const n = counts.get(state) || 0, pill = document.createElement("span");
        pill.className = "pill " + state.replace(/ /g, "-"); pill.dataset.count = n;
        pill.textContent = (n > 1 ? n + " × " : "") + state;
        pill.title = n ? n + " replica" + (n > 1 ? "s " : " ") + state : state;
        cell.appendChild(pill); cell.appendChild(document.createTextNode(" "));
      });
    };
    socket.onclose = function () { setTimeout(connect, 2000); };
  }
  connect();
})();
