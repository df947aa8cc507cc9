// A page of the whole log: #L10 marks a line, #L10-L20 a range (shift-click a second line number to make one);
// a marked line inside a folded pytest section opens that section.
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

  function mark(scroll) {
    var range = parse(window.location.hash);
    log.querySelectorAll(".sel").forEach(function (el) { el.classList.remove("sel"); });
    if (!range) { return; }
    var firstEl = null;
    for (var n = range[0]; n <= range[1]; n++) {
      var el = document.getElementById("L" + n);
      if (!el) { continue; }
      el.classList.add("sel");
      var section = el.closest("details");
      if (section && el.tagName !== "SUMMARY") { section.open = true; }
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
})();
