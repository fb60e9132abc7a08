// Reading the embedded records, shared by the any-two-axes table (pivot.js) and the first
// screen (overview.js). Record text reaches the page through textContent only.
window.ftmatrixRecords = function (data) {
  var axes = data.axes, cells = data.cells, recs = data.records;
  var OPERATION = axes.length - 2;
  return {
    // Axis value of the record at ``i``: a cell's pin, or the record's operation / case.
    value: function (i, axis) {
      return axis < OPERATION ? cells[recs[i]][axis + 1] : recs[i + 1 + axis - OPERATION];
    },
    el: function (tag, className, content) {
      var node = document.createElement(tag);
      if (className) { node.className = className; }
      if (content !== undefined) { node.textContent = content; }
      return node;
    },
    badge: function (severity) {
      var s = data.statuses[severity];
      var node = document.createElement("span");
      node.className = "status s-" + s[1];
      node.textContent = s[0];
      return node;
    }
  };
};
