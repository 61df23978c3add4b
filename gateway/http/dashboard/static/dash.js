// mqgate dashboard: the only script. Pages work without it; it asks before a
// kick or delete, and refreshes the overview's figures and charts.
"use strict";
document.addEventListener("submit", function (event) {
  var question = event.target.getAttribute("data-confirm");
  if (question && !window.confirm(question)) {
    event.preventDefault();
  }
});
document.addEventListener("DOMContentLoaded", function () {
  var charts = document.querySelector("[data-refresh]");
  if (!charts) { return; }
  var seconds = parseInt(charts.getAttribute("data-refresh"), 10) || 10;
  window.setInterval(function () {
    if (document.hidden) { return; }
    fetch(window.location.href, { credentials: "same-origin" }).then(function (r) {
      return r.ok ? r.text() : null;
    }).then(function (html) {
      if (!html) { return; }
      var doc = new DOMParser().parseFromString(html, "text/html");
      [".charts", ".cards"].forEach(function (sel) {
        var fresh = doc.querySelector(sel), old = document.querySelector(sel);
        if (fresh && old) { old.replaceWith(fresh); }
      });
    });
  }, seconds * 1000);
});
