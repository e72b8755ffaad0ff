// Upload a model through the management API with a progress bar; show the API's error message on failure.
(function () {
  const form = document.getElementById("upload-form");
  if (!form) return;
  const bar = document.getElementById("upload-progress");
  const status = document.getElementById("upload-status");
  function csrf() {
    const m = document.cookie.match(/(?:^|; )csrftoken=([^;]+)/);
    return m ? decodeURIComponent(m[1]) : "";
  }
  form.addEventListener("submit", function (event) {
    event.preventDefault();
    const data = new FormData(form);
    for (const key of ["labels_file", "tokenizer"]) {
      const f = data.get(key);
      if (f && f.size === 0) data.delete(key);
    }
    const picked = data.getAll("files");
    if (picked.length === 1) { data.delete("files"); data.append("file", picked[0]); }
    const xhr = new XMLHttpRequest();
    xhr.open("POST", "/api/v1/models");
    xhr.setRequestHeader("X-CSRFToken", csrf());
    bar.hidden = false; bar.value = 0; status.textContent = "Uploading…";
    xhr.upload.onprogress = function (e) { if (e.lengthComputable) bar.value = Math.round(100 * e.loaded / e.total); };
    xhr.upload.onload = function () { status.textContent = "Validating…"; };
    xhr.onload = function () {
      let body = {};
      try { body = JSON.parse(xhr.responseText); } catch (e) { /* not JSON */ }
      if (xhr.status === 201) {
        status.textContent = "Stored " + body.label + " (" + body.sha256.slice(0, 12) + ").";
        setTimeout(function () { window.location.reload(); }, 600);
      } else if (xhr.status === 202) {
        follow(body.id);
      } else {
        bar.value = 0;
        status.textContent = "Upload failed: " + ((body.error && body.error.message) || ("HTTP " + xhr.status));
        status.className = "flash error";
      }
    };
    // A worker checks archives and folders: follow its job until it ends.
    function follow(jobId) {
      fetch("/api/v1/jobs/" + jobId, {credentials: "same-origin"}).then(r => r.json()).then(function (job) {
        bar.value = job.progress;
        status.textContent = "Checking in a worker (job #" + jobId + "): " + (job.message || job.status);
        if (job.status === "succeeded") {
          status.textContent = "Stored " + job.output + ".";
          setTimeout(function () { window.location.reload(); }, 600);
        } else if (job.status === "failed" || job.status === "cancelled") {
          status.textContent = "Upload failed: " + (job.error || job.status);
          status.className = "flash error";
        } else {
          setTimeout(function () { follow(jobId); }, 500);
        }
      });
    }
    xhr.onerror = function () { status.textContent = "Upload failed: network error"; status.className = "flash error"; };
    xhr.send(data);
  });
})();
