(function () {
  var source = document.getElementById("pivot-data");
  var holder = document.getElementById("grid-holder");
  var controls = document.getElementById("pivot-controls");
  if (!source || !holder || !controls) { return; }
  var data = JSON.parse(source.textContent);
  var axes = data.axes, values = data.values, cells = data.cells, recs = data.records;
  var STRIDE = 6, OPERATION = axes.length - 2;
  var lowerLabels = values[0].map(function (v) { return v.toLowerCase(); });
  var rowAxis = document.getElementById("row-axis");
  var columnAxis = document.getElementById("column-axis");
  var text = document.getElementById("filter");
  var status = document.getElementById("status-filter");
  var summary = document.getElementById("pivot-summary");
  var filters = Array.prototype.slice.call(controls.querySelectorAll("select.axis-filter"));
  var S = window.ftmatrixState;
  var DEFAULT = [+rowAxis.value, +columnAxis.value];
  // The axes and filters live in the URL (rows, cols, q, status, f.<axis>), by name.
  if (S) {
    var fromUrl = [axes.indexOf(S.get("rows")), axes.indexOf(S.get("cols"))];
    if (fromUrl[0] >= 0 && fromUrl[1] >= 0 && fromUrl[0] !== fromUrl[1]) {
      rowAxis.value = String(fromUrl[0]);
      columnAxis.value = String(fromUrl[1]);
    }
    if (S.get("q") !== null) { text.value = S.get("q"); }
    if (S.get("status") !== null) { status.value = S.get("status"); }
    filters.forEach(function (select) {
      var wanted = S.get("f." + select.getAttribute("data-name"));
      var at = wanted === null ? -1 : values[+select.getAttribute("data-axis")].indexOf(wanted);
      if (at >= 0) { select.value = String(at); }
    });
  }
  var chosen = [+rowAxis.value, +columnAxis.value];
  var whole = {};
  data.whole.forEach(function (a) { whole[a] = true; });
  controls.hidden = false;

  var shared = window.ftmatrixRecords(data);
  var value = shared.value, el = shared.el, badge = shared.badge;
  // Cells (axis 0) are named by the axes that vary; the full label is the title.
  function name(axis, v) { return axis === 0 && data.names ? data.names[v] : values[axis][v]; }
  function problem(i) { return recs[i + 5] >= 0 && data.statuses[recs[i + 3]][2] === 1; }
  function detailLink(i) {
    var a = el("a", "", "details");
    a.setAttribute("href", "#" + data.anchors[recs[i + 5]]);
    return a;
  }
  function single(td, i) {
    td.appendChild(badge(recs[i + 3]));
    if (problem(i)) {
      td.appendChild(document.createTextNode(" "));
      td.appendChild(detailLink(i));
    }
    var message = data.texts[recs[i + 4]];
    if (message) { td.appendChild(el("div", "msg", message)); }
  }
  function listItems(list, members) {
    members.forEach(function (i) {
      var li = el("li");
      li.appendChild(badge(recs[i + 3]));
      li.appendChild(document.createTextNode(" "));
      li.appendChild(el("code", "", values[0][cells[recs[i]][1]]));
      li.appendChild(document.createTextNode(" "));
      li.appendChild(el("code", "", values[axes.length - 1][recs[i + 2]]));
      if (problem(i)) {
        li.appendChild(document.createTextNode(" "));
        li.appendChild(detailLink(i));
      }
      var message = data.texts[recs[i + 4]];
      if (message) { li.appendChild(el("div", "msg", message)); }
      list.appendChild(li);
    });
  }
  function combined(td, members) {
    var counts = {}, worst = -1;
    members.forEach(function (i) {
      var s = recs[i + 3];
      counts[s] = (counts[s] || 0) + 1;
      if (s > worst) { worst = s; }
    });
    var details = el("details", "combo"), head = el("summary"), list = el("ul");
    head.appendChild(badge(worst));
    head.appendChild(document.createTextNode(" " + counts[worst] + "/" + members.length));
    head.title = Object.keys(counts).sort(function (a, b) { return b - a; }).map(function (s) {
      return counts[s] + " " + data.statuses[s][0]; }).join(", ");
    details.appendChild(head);
    details.appendChild(list);
    // Filled when opened: a pivot over thousands of records would otherwise build
    // every list up front.
    details.addEventListener("toggle", function () {
      if (details.open && !list.firstChild) {
        listItems(list, members.slice().sort(function (a, b) {
          return recs[b + 3] - recs[a + 3] || a - b;  // worst first, then by cell and case
        }));
      }
    });
    td.appendChild(details);
  }
  function spanning(buckets, row, columns) {
    // A row made of one whole-cell record (say, uninstallable) shows it once.
    var first = -1;
    for (var k = 0; k < columns.length; k += 1) {
      var members = buckets[row * values[chosen[1]].length + columns[k]];
      if (!members || members.length !== 1) { return -1; }
      if (first < 0) { first = members[0]; }
      if (recs[members[0] + 5] !== recs[first + 5]) { return -1; }
    }
    return first >= 0 && whole[recs[first + 5]] ? first : -1;
  }
  function remember() {
    if (!S) { return; }
    var state = {rows: axes[chosen[0]], cols: axes[chosen[1]], q: text.value, status: status.value};
    filters.forEach(function (select) {
      var axis = +select.getAttribute("data-axis");
      state["f." + select.getAttribute("data-name")] =
        select.value === "" || select.parentNode.hidden ? null : values[axis][+select.value];
    });
    S.set(state);
  }
  function render() {
    var ra = chosen[0], ca = chosen[1], width = values[ca].length;
    var wanted = [];
    filters.forEach(function (select) {
      var axis = +select.getAttribute("data-axis");
      var off = axis === ra || axis === ca;
      select.parentNode.hidden = off;
      if (!off && select.value !== "") { wanted.push([axis, +select.value]); }
    });
    var terms = text.value.toLowerCase().split(/\s+/).filter(Boolean);
    var needed = -1;
    data.statuses.forEach(function (s, severity) {
      if (s[0] === status.value) { needed = severity; }
    });
    var buckets = {}, rowSeen = {}, rowHas = {}, shown = 0;
    for (var i = 0; i < recs.length; i += STRIDE) {
      var ok = true;
      for (var f = 0; f < wanted.length && ok; f += 1) {
        ok = value(i, wanted[f][0]) === wanted[f][1];
      }
      if (ok && terms.length) {
        var label = lowerLabels[cells[recs[i]][1]];
        ok = terms.every(function (t) { return label.indexOf(t) >= 0; });
      }
      if (!ok) { continue; }
      var r = value(i, ra), key = r * width + value(i, ca);
      (buckets[key] || (buckets[key] = [])).push(i);
      rowSeen[r] = true;
      if (recs[i + 3] === needed) { rowHas[r] = true; }
      shown += 1;
    }
    var rows = Object.keys(rowSeen).map(Number).filter(function (r) {
      return needed < 0 || rowHas[r]; }).sort(function (a, b) { return a - b; });
    var keep = {}, columnSeen = {};
    rows.forEach(function (r) { keep[r] = true; });
    Object.keys(buckets).forEach(function (key) {
      if (keep[Math.floor(key / width)]) { columnSeen[key % width] = true; }
    });
    var columns = Object.keys(columnSeen).map(Number).sort(function (a, b) { return a - b; });
    var table = el("table", "grid"), thead = el("thead"), tbody = el("tbody"), tr = el("tr");
    var corner = el("th", "", axes[ra] + " \\ " + axes[ca]);
    corner.setAttribute("scope", "col");
    tr.appendChild(corner);
    columns.forEach(function (c) {
      var th = el("th", "", name(ca, c));
      th.setAttribute("scope", "col");
      if (ca === 0) { th.title = values[0][c]; }
      tr.appendChild(th);
    });
    thead.appendChild(tr);
    rows.forEach(function (r) {
      var row = el("tr"), th = el("th"), spanned = spanning(buckets, r, columns);
      th.setAttribute("scope", "row");
      th.appendChild(el("code", "", name(ra, r)));
      if (ra === 0) { th.title = values[0][r]; }
      row.appendChild(th);
      if (spanned >= 0) {
        var td = el("td");
        td.colSpan = columns.length;
        single(td, spanned);
        row.appendChild(td);
      } else {
        columns.forEach(function (c) {
          var cell = el("td"), members = buckets[r * width + c];
          if (members && members.length === 1) { single(cell, members[0]); }
          else if (members) { combined(cell, members); }
          row.appendChild(cell);
        });
      }
      tbody.appendChild(row);
    });
    table.appendChild(thead);
    table.appendChild(tbody);
    holder.textContent = "";
    if (rows.length) { holder.appendChild(table); }
    else { holder.appendChild(el("p", "", "No records match these filters.")); }
    summary.textContent = shown + " of " + recs.length / STRIDE + " results, rows: " +
      axes[ra] + " (" + rows.length + "), columns: " + axes[ca] + " (" + columns.length + ").";
  }
  var pending = null;
  function later() {
    if (pending) { clearTimeout(pending); }
    pending = setTimeout(function () { pending = null; render(); remember(); }, 120);
  }
  function update() { render(); remember(); }
  function pickAxes(event) {
    var row = +rowAxis.value, column = +columnAxis.value;
    if (row === column) {  // the same axis twice: swap instead
      if (event.target === rowAxis) { column = chosen[0]; } else { row = chosen[1]; }
      rowAxis.value = String(row);
      columnAxis.value = String(column);
    }
    chosen = [row, column];
    update();
  }
  rowAxis.addEventListener("change", pickAxes);
  columnAxis.addEventListener("change", pickAxes);
  text.addEventListener("input", later);
  status.addEventListener("change", update);
  filters.forEach(function (select) { select.addEventListener("change", update); });
  filters.forEach(function (select) {
    var axis = +select.getAttribute("data-axis");
    select.parentNode.hidden = axis === chosen[0] || axis === chosen[1];
  });
  // A link that names another view: draw it (the page's own HTML is the default view).
  var restored = chosen[0] !== DEFAULT[0] || chosen[1] !== DEFAULT[1] || text.value ||
    status.value || filters.some(function (select) { return select.value !== ""; });
  if (restored) { render(); }
  else if (!holder.querySelector("table")) {
    // Not drawn by the server (a large matrix): draw it when it comes into view.
    if (window.IntersectionObserver) {
      var watcher = new IntersectionObserver(function (seen) {
        if (seen[0].isIntersecting) { watcher.disconnect(); render(); }
      });
      watcher.observe(holder);
    } else { render(); }
  }
})();
