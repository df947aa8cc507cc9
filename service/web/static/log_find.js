// Find in the log: the server lists the numbers of the lines holding the words (the whole log, every page); this
// page highlights the words in its lines, and ↓ / ↑ (Enter / Shift+Enter) go from match to match, opening folded
// sections, and on to the page holding the next match. Without JavaScript the form opens the search page instead.
(function () {
  "use strict";
  var form = document.getElementById("log-find"), log = document.getElementById("log");
  if (!form || !log || !window.fetch) { return; }
  var input = form.querySelector("input[name=q]"), nav = document.getElementById("find-nav");
  var count = document.getElementById("find-count");
  var page = Number(form.dataset.page), perPage = Number(form.dataset.perPage);
  var hits = [], complete = true, current = -1, searched = null;

  function pageOf(n) { return Math.floor((n - 1) / perPage) + 1; }
  // The server matches ASCII letters in either case: lower only those, so offsets stay those of the text.
  function lowered(text) { return text.replace(/[A-Z]/g, function (c) { return c.toLowerCase(); }); }

  function clear() {
    log.querySelectorAll("mark.find").forEach(function (m) {
      var parent = m.parentNode;
      parent.replaceChild(document.createTextNode(m.textContent), m);
      parent.normalize();
    });
    log.querySelectorAll(".hit, .cur").forEach(function (el) { el.classList.remove("hit", "cur"); });
  }

  // The line's text is split over colour spans: find the words in the joined text, wrap each piece in <mark>.
  function highlight(line, needle) {
    var text = line.querySelector(":scope > span");
    if (!text) { return; }
    var walker = document.createTreeWalker(text, NodeFilter.SHOW_TEXT), nodes = [], joined = "";
    while (walker.nextNode()) { nodes.push([walker.currentNode, joined.length]); joined += walker.currentNode.nodeValue; }
    var lower = lowered(joined), found = [];
    for (var at = lower.indexOf(needle); at >= 0; at = lower.indexOf(needle, at + needle.length)) {
      found.push([at, at + needle.length]);
    }
    for (var f = found.length - 1; f >= 0; f--) {  // from the end: earlier offsets stay valid as nodes split
      for (var i = nodes.length - 1; i >= 0; i--) {
        var node = nodes[i][0], start = nodes[i][1], end = start + node.nodeValue.length;
        var from = Math.max(found[f][0], start), to = Math.min(found[f][1], end);
        if (from >= to) { continue; }
        var piece = node.splitText(from - start);
        piece.splitText(to - from);
        var mark = document.createElement("mark");
        mark.className = "find";
        piece.parentNode.replaceChild(mark, piece);
        mark.appendChild(piece);
      }
    }
    line.classList.add("hit");
  }

  function show() {
    nav.hidden = false;
    if (!hits.length) { count.textContent = "no line contains it"; return; }
    count.textContent = (current + 1) + " of " + hits.length + (complete ? "" : "+") + " line" +
      (hits.length === 1 ? "" : "s");
  }

  function go(index) {
    if (!hits.length) { return; }
    current = (index + hits.length) % hits.length;
    var n = hits[current];
    if (pageOf(n) !== page) {
      window.location.href = "?page=" + pageOf(n) + "&q=" + encodeURIComponent(searched) + "#L" + n;
      return;
    }
    log.querySelectorAll(".cur").forEach(function (el) { el.classList.remove("cur"); });
    var line = document.getElementById("L" + n);
    if (line) {
      line.classList.add("cur");
      if (window.compileCiReveal) { window.compileCiReveal(line); }
      history.replaceState(null, "", "?page=" + page + "&q=" + encodeURIComponent(searched) + "#L" + n);
      line.scrollIntoView({ block: "center" });
    }
    show();
  }

  function search(startAtHash) {
    var query = input.value;
    if (!query.trim()) { return; }
    fetch(form.dataset.hits + "?q=" + encodeURIComponent(query), { headers: { "Accept": "application/json" } })
      .then(function (response) { return response.ok ? response.json() : null; })
      .then(function (data) {
        if (!data) { form.submit(); return; }  // the server's own search page says what went wrong
        clear();
        searched = query;
        hits = data.lines;
        complete = data.complete;
        var needle = lowered(query);
        hits.forEach(function (n) {
          var line = pageOf(n) === page && document.getElementById("L" + n);
          if (line) { highlight(line, needle); }
        });
        var wanted = /^#L(\d+)/.exec(window.location.hash), start = -1;
        if (startAtHash && wanted) { start = hits.indexOf(Number(wanted[1])); }
        if (start < 0) { start = hits.findIndex(function (n) { return pageOf(n) >= page; }); }
        if (!hits.length) { current = -1; show(); return; }
        go(start < 0 ? 0 : start);
      })
      .catch(function () { form.submit(); });
  }

  form.addEventListener("submit", function (event) {
    event.preventDefault();
    if (searched === input.value && hits.length) { go(current + 1); } else { search(false); }
  });
  input.addEventListener("keydown", function (event) {
    if (event.key === "Enter" && event.shiftKey) {
      event.preventDefault();
      if (searched === input.value && hits.length) { go(current - 1); } else { search(false); }
    }
  });
  document.getElementById("find-next").addEventListener("click", function () { go(current + 1); });
  document.getElementById("find-prev").addEventListener("click", function () { go(current - 1); });
  if (input.value) { search(true); }
})();
