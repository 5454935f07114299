// Filtering (all / failed / passed / skipped, text search), expand/collapse,
// and anchors: a link to a test opens its section even when a filter hid it.
(function () {
  "use strict";
  var tests = Array.prototype.slice.call(document.querySelectorAll("details.test"));
  var rows = Array.prototype.slice.call(document.querySelectorAll("tr[data-outcome]"));
  var buttons = Array.prototype.slice.call(document.querySelectorAll("button[data-filter]"));
  var search = document.getElementById("search");
  var shown = document.getElementById("shown");
  var state = { filter: "all", query: "" };

  function matches(el) {
    var o = el.getAttribute("data-outcome");
    var f = state.filter;
    var byOutcome = f === "all" || o === f || (f === "failed" && o === "error");
    return byOutcome && el.getAttribute("data-nodeid").toLowerCase().indexOf(state.query) !== -1;
  }

  function apply() {
    var n = 0;
    tests.forEach(function (t) { t.hidden = !matches(t); if (!t.hidden) n++; });
    rows.forEach(function (r) { r.hidden = !matches(r); });
    buttons.forEach(function (b) { b.setAttribute("aria-pressed", String(b.getAttribute("data-filter") === state.filter)); });
    if (shown) shown.textContent = n + " of " + tests.length + " tests shown";
  }

  buttons.forEach(function (b) {
    b.addEventListener("click", function () { state.filter = b.getAttribute("data-filter"); apply(); });
  });
  if (search) search.addEventListener("input", function () { state.query = search.value.trim().toLowerCase(); apply(); });
  Array.prototype.forEach.call(document.querySelectorAll("button[data-open]"), function (b) {
    b.addEventListener("click", function () {
      var open = b.getAttribute("data-open") === "1";
      tests.forEach(function (t) { if (!t.hidden) t.open = open; });
    });
  });

  function reveal() {
    var id = decodeURIComponent(location.hash.slice(1));
    var el = id && document.getElementById(id);
    if (!el) return;
    var test = el.closest("details.test");
    if (!test) return;
    if (test.hidden) { state.filter = "all"; state.query = ""; if (search) search.value = ""; apply(); }
    for (var d = el.closest("details"); d; d = d.parentElement && d.parentElement.closest("details")) d.open = true;
    el.scrollIntoView();
    test.classList.add("flash");
    setTimeout(function () { test.classList.remove("flash"); }, 1500);
  }
  window.addEventListener("hashchange", reveal);
  apply();
  reveal();
})();
