// Job page: status, progress and log lines pushed over the team's job websocket; reload when it ends.
(function () {
  const box = document.getElementById("job");
  if (!box || !window.WebSocket) return;
  const id = Number(box.dataset.job);
  const log = document.getElementById("job-log");
  const scheme = location.protocol === "https:" ? "wss://" : "ws://";
  function connect() {
    const socket = new WebSocket(scheme + location.host + "/ws/jobs/");
    socket.onmessage = function (event) {
      const msg = JSON.parse(event.data);
      if (msg.id !== id) return;
      const pill = box.querySelector(".job-status");
      // The socket replays recent jobs on every connect: reload only for an end seen happening here.
      const wasActive = ["queued", "running"].includes(pill.textContent.trim());
      pill.textContent = msg.status; pill.className = "pill job-status " + msg.status;
      box.querySelector(".job-progress").value = msg.progress;
      box.querySelector(".job-message").textContent = msg.message;
      if (msg.log) log.textContent += new Date().toTimeString().slice(0, 8) + " " + Math.round(msg.progress) + "% " + msg.log + "\n";
      if (wasActive && ["succeeded", "failed", "cancelled"].includes(msg.status)) setTimeout(function () { location.reload(); }, 800);
    };
    socket.onclose = function () { setTimeout(connect, 2000); };
  }
  connect();
})();
