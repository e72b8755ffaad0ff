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
      (msg.replicas.length ? msg.replicas : [{state: msg.status}]).forEach(function (r) {
        const pill = document.createElement("span");
        pill.className = "pill " + r.state; pill.textContent = r.state; pill.title = r.node || "";
        cell.appendChild(pill); cell.appendChild(document.createTextNode(" "));
      });
    };
    socket.onclose = function () { setTimeout(connect, 2000); };
  }
  connect();
})();
