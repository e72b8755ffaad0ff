// Jobs list, live: status pills, progress bars and messages follow the team's job pushes (the socket
// sends the current state of recent jobs on every connect, so a dropped connection back-fills).
(function () {
  const table = document.getElementById("jobs");
  if (!table) return;
  LantauLive.open("/ws/jobs/", {
    status: "jobs-connection",
    onMessage: function (msg) {
      const row = table.querySelector('tr[data-job="' + msg.id + '"]');
      if (!row) return;
      const pill = row.querySelector(".job-status");
      pill.className = "pill job-status " + msg.status; pill.textContent = msg.status;
      const bar = row.querySelector("progress");
      bar.value = msg.progress; bar.hidden = !["queued", "running"].includes(msg.status);
      row.querySelector("td.progress").dataset.sort = msg.progress;
      row.querySelector(".job-message").textContent = msg.error || msg.message;
    },
  });
})();
