// The first screen: compatibility tables redrawn for the chosen packages and operation,
// the records behind a square (of a table or of the compact grid), the open failure group,
// all kept in the URL. Record text reaches the page through textContent only.
(function () {
  var source = document.getElementById("pivot-data");
  var panel = document.getElementById("selection");
  var S = window.ftmatrixState;
  if (!source || !panel) { return; }
  var data = JSON.parse(source.textContent);
  var axes = data.axes, values = data.values, cells = data.cells, recs = data.records;
  var STRIDE = 6, OPERATION = axes.length - 2, CASE = axes.length - 1, LIMIT = 200;
  var selA = document.getElementById("compat-a");
  var selB = document.getElementById("compat-b");
  var selOp = document.getElementById("compat-op");
  var holder = document.getElementById("compat-holder");

  var UNINSTALLABLE = data.statuses.map(function (s) { return s[0]; }).indexOf("uninstallable");
  var shared = window.ftmatrixRecords(data);
  var value = shared.value, el = shared.el, badge = shared.badge;
  function square(members, where, attributes) {
    // As the page's Python: a cell that could not install judges the square only when
    // no cell with these two versions installed (it pins more than the two).
    var counts = {}, worst = -1, rank = function (s) { return s === UNINSTALLABLE ? -1 : s; };
    members.forEach(function (i) {
      var s = recs[i + 3];
      counts[s] = (counts[s] || 0) + 1;
      if (worst < 0 || rank(s) > rank(worst)) { worst = s; }
    });
    var title = where + ": " + Object.keys(counts).sort(function (x, y) { return y - x; })
      .map(function (s) { return counts[s] + " " + data.statuses[s][0]; }).join(", ");
    var button = el("button", "sq s-" + data.statuses[worst][1], String(counts[worst]));
    button.type = "button";
    button.title = title;
    button.setAttribute("aria-label", title);
    Object.keys(attributes).forEach(function (k) { button.setAttribute("data-" + k, attributes[k]); });
    return button;
  }
  function pick(select, wanted) {
    if (!select || wanted === null) { return; }
    for (var k = 0; k < select.options.length; k += 1) {
      if (select.options[k].value === wanted) { select.value = wanted; }
    }
  }
  function operationIndex() {
    return selOp && selOp.value !== "" ? values[OPERATION].indexOf(selOp.value) : -1;
  }

  function renderCompat() {
    if (!holder || !selA || !selB) { return; }
    var a = axes.indexOf(selA.value), b = axes.indexOf(selB.value), op = operationIndex();
    var width = values[b].length, buckets = {}, rowSeen = {}, columnSeen = {};
    for (var i = 0; i < recs.length; i += STRIDE) {
      if (op >= 0 && value(i, OPERATION) !== op) { continue; }
      var r = value(i, a), c = value(i, b), key = r * width + c;
      (buckets[key] || (buckets[key] = [])).push(i);
      rowSeen[r] = true;
      columnSeen[c] = true;
    }
    var order = function (x, y) { return x - y; };
    var rows = Object.keys(rowSeen).map(Number).sort(order);
    var columns = Object.keys(columnSeen).map(Number).sort(order);
    var table = el("table", "compat"), head = el("tr"), body = el("tbody"), thead = el("thead");
    table.appendChild(el("caption", "", axes[a] + " \u00d7 " + axes[b] + ", " +
      (op >= 0 ? values[OPERATION][op] : "all operations")));
    var corner = el("th", "", axes[a] + " \\ " + axes[b]);
    corner.setAttribute("scope", "col");
    head.appendChild(corner);
    columns.forEach(function (c) {
      var th = el("th", "", values[b][c]);
      th.setAttribute("scope", "col");
      head.appendChild(th);
    });
    thead.appendChild(head);
    rows.forEach(function (r) {
      var tr = el("tr"), th = el("th", "", values[a][r]);
      th.setAttribute("scope", "row");
      tr.appendChild(th);
      columns.forEach(function (c) {
        var td = el("td"), members = buckets[r * width + c];
        if (members) {
          td.appendChild(square(members, axes[a] + " " + values[a][r] + " \u00d7 " + axes[b] +
            " " + values[b][c], {a: values[a][r], b: values[b][c]}));
        }
        tr.appendChild(td);
      });
      body.appendChild(tr);
    });
    table.appendChild(thead);
    table.appendChild(body);
    holder.textContent = "";
    holder.appendChild(table);
  }

  function members(selection) {
    var out = [], a = selA ? axes.indexOf(selA.value) : -1, b = selB ? axes.indexOf(selB.value) : -1;
    var op = operationIndex(), cellOp = values[OPERATION].indexOf(selection.op);
    for (var i = 0; i < recs.length; i += STRIDE) {
      if (selection.cell !== undefined) {
        if (values[0][value(i, 0)] === selection.cell && value(i, OPERATION) === cellOp) { out.push(i); }
      } else if (values[a][value(i, a)] === selection.a && values[b][value(i, b)] === selection.b &&
                 (op < 0 || value(i, OPERATION) === op)) {
        out.push(i);
      }
    }
    return out.sort(function (x, y) { return recs[y + 3] - recs[x + 3] || x - y; });
  }

  function showSelection(selection, focus) {
    panel.textContent = "";
    if (!selection) { return; }
    var found = members(selection);
    var what = selection.cell !== undefined ? selection.cell + ", " + selection.op :
      selA.value + " " + selection.a + " \u00d7 " + selB.value + " " + selection.b + ", " +
      (selOp.value || "all operations");
    var head = el("div", "selection-head");
    head.appendChild(el("strong", "", found.length + " results: "));
    head.appendChild(document.createTextNode(what + " "));
    var close = el("button", "close", "close");
    close.type = "button";
    close.addEventListener("click", function () {
      S.set({sa: null, sb: null, cell: null, cop: null});
      showSelection(null);
    });
    head.appendChild(close);
    panel.appendChild(head);
    var list = el("ul", "records");
    found.slice(0, LIMIT).forEach(function (i) {
      var li = el("li");
      li.appendChild(badge(recs[i + 3]));
      li.appendChild(document.createTextNode(" "));
      li.appendChild(el("code", "", values[0][cells[recs[i]][1]]));
      li.appendChild(document.createTextNode(" "));
      li.appendChild(el("code", "", values[CASE][recs[i + 2]]));
      if (recs[i + 5] >= 0 && data.statuses[recs[i + 3]][2] === 1) {
        var link = el("a", "", "details");
        link.setAttribute("href", "#" + data.anchors[recs[i + 5]]);
        li.appendChild(document.createTextNode(" "));
        li.appendChild(link);
      }
      var message = data.texts[recs[i + 4]];
      if (message) { li.appendChild(el("div", "msg", message)); }
      list.appendChild(li);
    });
    panel.appendChild(list);
    if (found.length > LIMIT) {
      panel.appendChild(el("p", "meta", "and " + (found.length - LIMIT) + " more."));
    }
    if (focus) { panel.focus(); }
  }

  function openGroup(id, scroll) {
    var section = id && document.getElementById(id);
    if (!section || section.className.indexOf("group") < 0) { return; }
    var inner = section.querySelector("details.cells") || section.querySelector("details");
    if (inner) { inner.open = true; }
    section.classList.add("chosen");
    if (scroll) { section.scrollIntoView(); }
  }

  function hudSelection(button) {
    var row = button.closest("tr");
    // The row is named by the axes that vary; its full label is data-cell.
    return {cell: row.cells[0].getAttribute("data-cell"), op: button.getAttribute("data-op")};
  }
  // The compact grid's squares carry no title (a large grid would double in size):
  // it is written when the pointer or the focus first reaches one.
  function describe(event) {
    var button = event.target.closest ? event.target.closest("button.sq[data-op]") : null;
    if (!button || button.title) { return; }
    var selection = hudSelection(button), counts = {};
    members(selection).forEach(function (i) {
      counts[recs[i + 3]] = (counts[recs[i + 3]] || 0) + 1;
    });
    button.title = selection.cell + " " + selection.op + ": " + Object.keys(counts)
      .sort(function (x, y) { return y - x; })
      .map(function (k) { return counts[k] + " " + data.statuses[k][0]; }).join(", ");
    button.setAttribute("aria-label", button.title);
  }
  document.addEventListener("mouseover", describe);
  document.addEventListener("focusin", describe);

  document.addEventListener("click", function (event) {
    var target = event.target;
    var button = target.closest ? target.closest("button.sq") : null;
    if (button) {
      var selection;
      if (button.hasAttribute("data-op")) {
        selection = hudSelection(button);
        S.set({cell: selection.cell, cop: selection.op, sa: null, sb: null});
      } else {
        selection = {a: button.getAttribute("data-a"), b: button.getAttribute("data-b")};
        S.set({sa: selection.a, sb: selection.b, cell: null, cop: null});
      }
      showSelection(selection, true);
      return;
    }
    var link = target.closest ? target.closest("a[data-group]") : null;
    if (link) {
      event.preventDefault();
      S.set({group: link.getAttribute("data-group")});
      openGroup(link.getAttribute("data-group"), true);
    }
  });
  document.addEventListener("toggle", function (event) {
    var details = event.target, section = details.parentNode;
    if (section && section.className && String(section.className).indexOf("group") >= 0) {
      S.set({group: details.open ? section.id : null});
    }
  }, true);

  function changed() {
    S.set({a: selA.value, b: selB.value, op: selOp.value, sa: null, sb: null});
    renderCompat();
    showSelection(null);
  }
  [selA, selB, selOp].forEach(function (select) {
    if (select) { select.addEventListener("change", changed); }
  });

  function restore() {
    pick(selA, S.get("a"));
    pick(selB, S.get("b"));
    pick(selOp, S.get("op"));
    if (S.get("a") || S.get("b") || S.get("op")) { renderCompat(); }
    if (S.get("cell") !== null) {
      showSelection({cell: S.get("cell"), op: S.get("cop")}, false);
    } else if (S.get("sa") !== null && selA) {
      showSelection({a: S.get("sa"), b: S.get("sb")}, false);
    }
    openGroup(S.get("group"), S.get("sa") === null && S.get("cell") === null);
  }
  window.addEventListener("hashchange", function () {
    if (location.hash.indexOf("=") >= 0) { S.reload(); restore(); }
  });
  restore();
})();
