// A page of the whole log: #L10 marks a line, #L10-L20 a range (shift-click a second line number to make one);
// a marked line inside a folded section opens it (and the sections around it); the timestamps column can be
// hidden, and the choice is remembered.
(function () {
  "use strict";
  var log = document.getElementById("log");
  if (!log) { return; }
  var anchor = null;

  function parse(hash) {
    var m = /^#L(\d+)(?:-L(\d+))?$/.exec(hash);
    if (!m) { return null; }
    var first = Number(m[1]), last = Number(m[2] || m[1]);
    return first <= last ? [first, last] : [last, first];
  }

  // Opens every folded section holding `el` (a section's own first line stays as it is: it is the fold).
  function reveal(el) {
    var from = el.tagName === "SUMMARY" ? el.parentElement.parentElement : el.parentElement;
    for (var d = from && from.closest("details"); d; d = d.parentElement && d.parentElement.closest("details")) {
      d.open = true;
    }
  }
  window.compileCiReveal = reveal;  // log_find.js opens the sections of the match it goes to

  function mark(scroll) {
    var range = parse(window.location.hash);
    log.querySelectorAll(".sel").forEach(function (el) { el.classList.remove("sel"); });
    if (!range) { return; }
    var firstEl = null;
    for (var n = range[0]; n <= range[1]; n++) {
      var el = document.getElementById("L" + n);
      if (!el) { continue; }
      el.classList.add("sel");
      reveal(el);
      if (!firstEl) { firstEl = el; }
    }
    if (firstEl) { anchor = range[0]; if (scroll) { firstEl.scrollIntoView({ block: "center" }); } }
  }

  log.addEventListener("click", function (event) {
    var link = event.target.closest("a.n");
    if (!link) { return; }
    var number = Number(link.textContent);
    event.preventDefault();
    if (event.shiftKey && anchor !== null && anchor !== number) {
      var low = Math.min(anchor, number), high = Math.max(anchor, number);
      history.replaceState(null, "", "#L" + low + "-L" + high);
    } else {
      history.replaceState(null, "", "#L" + number);
      anchor = number;
    }
    mark(false);
  });
  window.addEventListener("hashchange", function () { mark(true); });
  mark(true);

  var toggles = document.querySelectorAll(".times-toggle");
  function showTimes(on) {
    log.classList.toggle("times", on);
    log.classList.toggle("no-times", !on);
    toggles.forEach(function (box) { box.checked = on; });
  }
  var saved = null;
  try { saved = window.localStorage.getItem("compile-ci.log-times"); } catch (e) { saved = null; }
  var first = log.querySelector(".t");
  if (saved !== null) { showTimes(saved === "1"); }
  else { toggles.forEach(function (box) { box.checked = !!first && getComputedStyle(first).display !== "none"; }); }
  toggles.forEach(function (box) {
    box.addEventListener("change", function () {
      showTimes(box.checked);
      try { window.localStorage.setItem("compile-ci.log-times", box.checked ? "1" : "0"); } catch (e) { /* private mode */ }
    });
  });
})();
