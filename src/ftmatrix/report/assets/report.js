(function () {
  function openTarget() {
    var id = location.hash && decodeURIComponent(location.hash.slice(1));
    var target = id && document.getElementById(id);
    if (target && target.tagName === "DETAILS") { target.open = true; target.scrollIntoView(); }
  }
  window.addEventListener("hashchange", openTarget);
  openTarget();
  var button = document.getElementById("check");
  if (button) {
    button.addEventListener("click", function () {
      var cells = JSON.parse(document.getElementById("cells-data").textContent);
      var mine = {};
      document.getElementById("freeze").value.split(/\n/).forEach(function (line) {
        var m = line.trim().match(/^([A-Za-z0-9_.-]+)==([^\s;]+)/);
        if (m) { mine[m[1].toLowerCase().replace(/[-_.]+/g, "-")] = m[2]; }
      });
      var ranked = Object.keys(cells).map(function (label) {
        var pins = cells[label].pins, same = 0, total = 0;
        Object.keys(pins).forEach(function (name) {
          total += 1;
          var key = name.toLowerCase().replace(/[-_.]+/g, "-");
          var want = pins[name] === null ? undefined : pins[name];
          var have = mine[key];
          var base = function (v) { return v.split("+")[0]; };
          if (have === want || (have && want && base(have) === base(want))) { same += 1; }
        });
        return {label: label, same: same, total: total, statuses: cells[label].statuses};
      }).sort(function (a, b) { return b.same - a.same || a.label.localeCompare(b.label); });
      var out = document.getElementById("verdict");
      out.textContent = "";
      ranked.slice(0, 3).forEach(function (cell) {
        var p = document.createElement("p");
        var verdict = Object.keys(cell.statuses).map(function (s) {
          return cell.statuses[s] + " " + s; }).join(", ");
        p.textContent = cell.label + " (" + cell.same + "/" + cell.total +
          " pins match): " + verdict;
        out.appendChild(p);
      });
    });
  }
})();
