// Refreshes the monitor's body in place, without reloading the page.
(function () {
  "use strict";
  var body = document.body;
  var event = body.getAttribute("data-event") || "";
  var interval = parseInt(body.getAttribute("data-refresh-ms"), 10) || 15000;
  window.outpostMonitorLoadedAt = Date.now();
  function refresh() {
    var url = "/admin/monitor/fragment" + (event ? "?event=" + encodeURIComponent(event) : "");
    fetch(url, { credentials: "same-origin", headers: { "Accept": "text/html" } })
      .then(function (response) {
        if (response.status === 401) { window.location.href = "/admin/sign-in"; return null; }
        return response.ok ? response.text() : null;
      })
      .then(function (html) {
        if (html !== null && html !== undefined) { document.getElementById("monitor-body").innerHTML = html; }
      })
      .catch(function () { /* keep the last view; the next tick tries again */ });
  }
  setInterval(refresh, interval);
})();
