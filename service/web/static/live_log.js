// Live log of a running job: asks the server for the lines written since the last byte offset and appends
// them (the server renders and escapes them), until the job completes. Polling, not a stream, so that any
// number of open tabs costs the web process only short requests.
(function () {
  "use strict";
  var log = document.getElementById("log");
  if (!log || !log.dataset.live) { return; }
  var offset = Number(log.dataset.offset || 0);
  var note = document.getElementById("live-note");
  var state = document.getElementById("job-state");

  function atBottom() { return window.innerHeight + window.scrollY >= document.body.scrollHeight - 60; }

  function poll() {
    fetch(log.dataset.live + "?offset=" + offset, { headers: { "Accept": "application/json" } })
      .then(function (response) { return response.ok ? response.json() : null; })
      .then(function (data) {
        if (!data) { setTimeout(poll, 2000); return; }
        var follow = atBottom();
        if (data.html) { log.insertAdjacentHTML("beforeend", data.html); }
        offset = data.offset;
        if (follow) { window.scrollTo(0, document.body.scrollHeight); }
        if (data.more) { setTimeout(poll, 0); return; }
        if (data.state === "completed") {
          state.textContent = data.conclusion || "completed";
          state.className = data.conclusion || "completed";
          note.innerHTML = "· the job completed: <a href=\"\">reload for its test results</a>";
          return;
        }
        state.textContent = data.state;
        setTimeout(poll, 1000);
      })
      .catch(function () { setTimeout(poll, 2000); });
  }
  setTimeout(poll, 1000);
})();
