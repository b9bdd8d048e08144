// Arbiter's pages work without this script; it adds two things.
// 1. On the newest page of decisions, rows of new decisions that match the
//    filter arrive as server-sent events (each row's HTML as one JSON
//    string) and are put at the top; the table keeps its page size, and
//    the "Older" link follows the last row.
// 2. A file chosen in the what-if form is read into the paste box.
(function () {
  "use strict";
  var table = document.querySelector("table[data-live]");
  if (table && window.EventSource) {
    var tbody = table.tBodies[0];
    var size = parseInt(table.getAttribute("data-page-size"), 10) || 50;
    var status = document.getElementById("live-status");
    var older = document.getElementById("older");
    var fresh = 0;
    var source = new EventSource(table.getAttribute("data-live"));
    source.addEventListener("open", function () {
      table.setAttribute("data-connected", "true");
    });
    source.addEventListener("decision", function (ev) {
      var empty = tbody.querySelector("tr.empty");
      if (empty) { empty.remove(); }
      var tmp = document.createElement("tbody");
      tmp.innerHTML = JSON.parse(ev.data); // the row, as one JSON string
      var row = tmp.firstElementChild;
      if (!row || tbody.querySelector('tr[data-seq="' + row.getAttribute("data-seq") + '"]')) { return; }
      tbody.insertBefore(row, tbody.firstElementChild);
      row.classList.add("fresh");
      var trimmed = false;
      while (tbody.rows.length > size) { tbody.deleteRow(-1); trimmed = true; }
      if (trimmed && older) {
        var last = tbody.rows[tbody.rows.length - 1].getAttribute("data-seq");
        var url = new URL(older.getAttribute("href") || window.location.href, window.location.href);
        url.pathname = window.location.pathname;
        url.search = window.location.search;
        url.searchParams.set("before", last);
        older.setAttribute("href", url.pathname + url.search);
        older.hidden = false;
      }
      fresh++;
      status.textContent = fresh + (fresh === 1 ? " new decision" : " new decisions") + " since this page loaded.";
    });
    source.addEventListener("error", function () {
      table.removeAttribute("data-connected");
    });
  }
  document.querySelectorAll("input[type=file][data-target]").forEach(function (input) {
    input.addEventListener("change", function () {
      var file = input.files && input.files[0];
      if (!file) { return; }
      file.text().then(function (text) {
        var target = document.getElementById(input.getAttribute("data-target"));
        target.value = text;
        target.focus();
      });
    });
  });
  var result = document.getElementById("whatif-result");
  if (result) { result.focus(); }
})();
