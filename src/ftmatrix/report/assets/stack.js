// "Does my stack work?" in the page: ftmatrix check's answer to a pasted pip freeze.
// The data is lookup_table() of ftmatrix/check/verdict.py: everything check knows of the
// results before it sees a stack. This file takes only the steps that need the stack,
// each after the Python function named beside it, and prints what report_text prints
// (less its "results:" line). tests/test_stack_js.py gives both the same inputs.
(function (root) {
  "use strict";

  // -- Versions, as packaging.version reads and orders them (PEP 440) -------------------
  var VERSION = new RegExp(
    "^\\s*v?(?:(?:([0-9]+)!)?([0-9]+(?:\\.[0-9]+)*)" +
    "([-_.]?(alpha|a|beta|b|preview|pre|c|rc)[-_.]?([0-9]+)?)?" +
    "((?:-([0-9]+))|(?:[-_.]?(post|rev|r)[-_.]?([0-9]+)?))?" +
    "([-_.]?(dev)[-_.]?([0-9]+)?)?)" +
    "(?:\\+([a-z0-9]+(?:[-_.][a-z0-9]+)*))?\\s*$", "i");
  var PRE = {a: "a", alpha: "a", b: "b", beta: "b", c: "rc", pre: "rc", preview: "rc", rc: "rc"};

  function parseVersion(text) {  // Version(text); null where it raises InvalidVersion
    var m = VERSION.exec(text);
    if (!m) { return null; }
    var local = null;
    if (m[13]) {
      local = m[13].toLowerCase().split(/[-_.]/).map(function (part) {
        return /^[0-9]+$/.test(part) ? Number(part) : part;
      });
    }
    return {
      epoch: m[1] ? Number(m[1]) : 0,
      release: m[2].split(".").map(Number),
      pre: m[4] ? [PRE[m[4].toLowerCase()], m[5] ? Number(m[5]) : 0] : null,
      post: m[6] ? Number(m[7] !== undefined ? m[7] : m[9] || 0) : null,
      dev: m[10] ? Number(m[12] || 0) : null,
      local: local
    };
  }

  function publicText(v) {  // Version.public: the normal form without the local label
    return (v.epoch ? v.epoch + "!" : "") + v.release.join(".") +
      (v.pre ? v.pre[0] + v.pre[1] : "") +
      (v.post !== null ? ".post" + v.post : "") +
      (v.dev !== null ? ".dev" + v.dev : "");
  }

  // packaging's _cmpkey, with its infinities as a leading rank: [0] below any value, [2]
  // above, [1, ...] a value.
  function sortKey(v, withLocal) {
    var release = v.release.slice();
    while (release.length && release[release.length - 1] === 0) { release.pop(); }
    var pre = v.pre ? [1, v.pre[0], v.pre[1]] : (v.post === null && v.dev !== null ? [0] : [2]);
    var local = [0];
    if (withLocal && v.local) {
      local = [1, v.local.map(function (part) {
        return typeof part === "number" ? [1, part, ""] : [0, 0, part];
      })];
    }
    return [v.epoch, release, pre, v.post === null ? [0] : [1, v.post],
      v.dev === null ? [2] : [1, v.dev], local];
  }

  function compare(a, b) {  // Python's order of tuples, numbers and strings
    if (Array.isArray(a)) {
      for (var i = 0; i < a.length && i < b.length; i++) {
        var c = compare(a[i], b[i]);
        if (c) { return c; }
      }
      return a.length - b.length;
    }
    return a < b ? -1 : (a > b ? 1 : 0);
  }

  function publicKey(text) {  // compare.public_version; null where the text is not a version
    var v = parseVersion(text);
    return v ? sortKey(v, false) : null;
  }

  function same(a, b) {  // compare.same_version
    if (a === null || b === null) { return a === b; }
    var va = parseVersion(a), vb = parseVersion(b);
    if (!va || !vb) { return a === b; }
    if (va.local === null || vb.local === null) { return publicText(va) === publicText(vb); }
    return compare(sortKey(va, true), sortKey(vb, true)) === 0;
  }

  function older(a, b) {  // compare.is_older
    if (a === null || b === null) { return false; }
    var ka = publicKey(a), kb = publicKey(b);
    return ka !== null && kb !== null && compare(ka, kb) < 0;
  }

  function steps(yours, theirs, tested) {  // compare.releases_apart
    if (yours === null || theirs === null) { return 1; }
    var keys = [];
    var all = tested.concat([yours]);
    for (var i = 0; i < all.length; i++) {
      var k = publicKey(all[i]);
      if (k === null) { return 1; }
      if (indexOfKey(keys, k) < 0) { keys.push(k); }
    }
    keys.sort(compare);
    var mine = indexOfKey(keys, publicKey(yours));
    var key = publicKey(theirs);
    var at = key === null ? -1 : indexOfKey(keys, key);
    return at < 0 ? 1 : Math.abs(mine - at);
  }

  function indexOfKey(keys, key) {
    for (var i = 0; i < keys.length; i++) { if (compare(keys[i], key) === 0) { return i; } }
    return -1;
  }

  // -- The stack, as parse_freeze reads it ---------------------------------------------
  var FREEZE_FORMAT = "name==version, name @ URL, -e ..., or a # comment";
  var NAME = "[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?";
  var REQUIREMENT = new RegExp("^(" + NAME + ")\\s*(\\[[^\\]]*\\])?\\s*(.*)$");
  var SPECIFIER = /^\s*(===|==|!=|~=|<=|>=|<|>)\s*([^\s,;()]+)\s*$/;

  function UsageError(message) { this.message = message; }

  function canonical(name) { return name.replace(/[-_.]+/g, "-").toLowerCase(); }

  function pyRepr(text) {  // repr() of a str, as check's messages quote a line
    var quote = text.indexOf("'") >= 0 && text.indexOf('"') < 0 ? '"' : "'";
    var out = "";
    for (var i = 0; i < text.length; i++) {
      var ch = text[i], code = text.charCodeAt(i);
      if (ch === "\\" || ch === quote) { out += "\\" + ch; }
      else if (ch === "\n") { out += "\\n"; }
      else if (ch === "\r") { out += "\\r"; }
      else if (ch === "\t") { out += "\\t"; }
      else if (code < 0x20 || (code >= 0x7f && code < 0xa0)) {
        out += "\\x" + (code < 16 ? "0" : "") + code.toString(16);
      } else { out += ch; }
    }
    return quote + out + quote;
  }

  // Requirement(line), for the forms a freeze holds: null where packaging refuses it.
  function parseRequirement(line) {
    var m = REQUIREMENT.exec(line);
    if (!m) { return null; }
    var rest = m[3];
    if (rest.charAt(0) === "@") {
      var url = rest.slice(1).trim().split(/\s+;/)[0].trim();
      return url && !/\s/.test(url) ? {name: m[1], url: url, specifiers: []} : null;
    }
    var text = rest.split(";")[0].trim();
    if (text.charAt(0) === "(" && text.charAt(text.length - 1) === ")") {
      text = text.slice(1, -1);
    }
    var specifiers = [];
    if (text.trim()) {
      var parts = text.split(",");
      for (var i = 0; i < parts.length; i++) {
        var s = SPECIFIER.exec(parts[i]);
        if (!s) { return null; }
        var version = s[2];
        if (s[1] !== "===") {
          var wildcard = (s[1] === "==" || s[1] === "!=") && /\.\*$/.test(version);
          if (!parseVersion(wildcard ? version.slice(0, -2) : version)) { return null; }
        }
        specifiers.push({operator: s[1], version: version});
      }
    }
    return {name: m[1], url: null, specifiers: specifiers};
  }

  function versionFromUrl(url, name) {  // _version_from_url
    var path = /^[A-Za-z][A-Za-z0-9+.-]*:\/\/[^/?#]*([^?#]*)/.exec(url);
    var filename = (path ? path[1] : url.split(/[?#]/)[0]).split("/").pop();
    try { filename = decodeURIComponent(filename); } catch (e) { /* kept as written */ }
    var named, version;
    if (/\.whl$/.test(filename)) {
      var parts = filename.slice(0, -4).split("-");
      if (parts.length !== 5 && parts.length !== 6) { return null; }
      named = canonical(parts[0]);
      version = parseVersion(parts[1]);
    } else {
      var stem = /\.tar\.gz$/.test(filename) ? filename.slice(0, -7) :
        (/\.zip$/.test(filename) ? filename.slice(0, -4) : null);
      if (stem === null || stem.lastIndexOf("-") < 0) { return null; }
      named = canonical(stem.slice(0, stem.lastIndexOf("-")));
      version = parseVersion(stem.slice(stem.lastIndexOf("-") + 1));
    }
    if (!version || named !== name) { return null; }
    var local = version.local ? "+" + version.local.join(".") : "";
    return publicText(version) + local;
  }

  function parseFreeze(text, source) {  // parse_freeze
    var packages = new Map(), unversioned = new Map(), where = new Map(), notes = [];
    text = text.replace(/^\ufeff/, "");
    var lines = text.split(/\r\n|[\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029]/);
    for (var number = 1; number <= lines.length; number++) {
      var line = lines[number - 1].replace(/(^|\s+)#.*$/, "").trim();
      if (!line) { continue; }
      var at = source + ":" + number;
      if (/^(-r|-c|--requirement|--constraint)(\s|=|$)/.test(line)) {
        throw new UsageError(at + ": " + pyRepr(line) + " names another file, which check " +
          "does not follow: check the stack as installed (`pip freeze` prints every " +
          "package) or list the other file's pins here");
      }
      if (line.indexOf("-e ") === 0 || line.indexOf("--editable") === 0) {
        var egg = /[#&]egg=([A-Za-z0-9][A-Za-z0-9._-]*)/.exec(line);
        if (egg) { unversioned.set(canonical(egg[1]), "editable (" + at + ")"); }
        else {
          notes.push(at + ": editable install without a name or version, left out: " + line);
        }
        continue;
      }
      if (line.charAt(0) === "-") {
        notes.push(at + ": option line, left out: " + line);
        continue;
      }
      var requirement = parseRequirement(line);
      if (!requirement) {
        var hint = /^- TRL version: /m.test(text) ?
          " (it reads like `trl env` output: use --trl-env)" : "";
        throw new UsageError(at + ": " + pyRepr(line) + " is not a freeze line (" +
          FREEZE_FORMAT + ")" + hint);
      }
      var name = canonical(requirement.name);
      if (where.has(name)) {
        throw new UsageError(at + ": " + pyRepr(line) + ": " + requirement.name +
          " is listed twice (also at line " + where.get(name) + ")");
      }
      where.set(name, number);
      if (requirement.url) {
        var fromUrl = versionFromUrl(requirement.url, name);
        if (fromUrl === null) {
          unversioned.set(name, "installed from " + requirement.url + " (" + at + ")");
        } else { packages.set(name, fromUrl); }
        continue;
      }
      var pins = requirement.specifiers;
      if (pins.length !== 1 || (pins[0].operator !== "==" && pins[0].operator !== "===") ||
          pins[0].version.indexOf("*") >= 0) {
        throw new UsageError(at + ": " + pyRepr(line) + " is not a pinned version (" +
          FREEZE_FORMAT + "): a freeze names the one version installed");
      }
      if (!parseVersion(pins[0].version)) {
        throw new UsageError(at + ": " + pyRepr(line) + ": " + pyRepr(pins[0].version) +
          " is not a version");
      }
      packages.set(name, pins[0].version);
    }
    return {source: source, packages: packages, unversioned: unversioned, notes: notes};
  }

  function knows(stack, name) {  // Stack.knows of a complete listing
    return !stack.unversioned.has(canonical(name));
  }

  function versionOf(stack, name) {  // Stack.version
    var key = canonical(name);
    return stack.packages.has(key) ? stack.packages.get(key) : null;
  }

  // -- The data, unpacked from lookup_table's compact form -----------------------------
  function unpack(data) {
    var text = function (i) { return data.texts[i]; };
    var cells = data.cells.map(function (cell) {
      var pins = new Map();
      data.axes.forEach(function (axis, i) { pins.set(axis, cell[2][i]); });
      return {label: cell[0], python: cell[1], pins: pins};
    });
    var groups = data.groups.map(function (group) {
      return {operation: group[0], hardware: group[1], cells: group[2].map(function (e) {
        return {cell: cells[e[0]], label: cells[e[0]].label, verdict: text(e[1]),
          what: text(e[2]), reason: text(e[3]), counts: text(e[4]), problems: e[5].map(text),
          issues: e[6].map(function (i) { return data.issues[i]; })};
      })};
    });
    var constraints = data.constraints.map(function (c) {
      return {group: groups[c[0]], package: c[1], kind: c[2], versions: c[3], when: c[4],
        requirement: c[5], line: c[6]};
    });
    return {axes: data.axes, tested: data.tested, cells: cells, groups: groups,
      constraints: constraints};
  }

  // -- The verdicts, as check_stack reaches them ---------------------------------------
  function match(data, stack, entry, compared) {  // _match
    var cell = entry.cell, changes = [];
    compared.forEach(function (axis) {
      var yours = versionOf(stack, axis);
      var theirs = cell.pins.has(axis) ? cell.pins.get(axis) : null;
      if (same(yours, theirs)) { return; }
      changes.push({package: axis, yours: yours, cell: theirs,
        steps: steps(yours, theirs, Object.prototype.hasOwnProperty.call(data.tested, axis) ?
          data.tested[axis] : [])});
    });
    var total = 0, downgrades = 0;
    changes.forEach(function (c) {
      total += c.steps;
      if (older(c.cell, c.yours)) { downgrades += 1; }
    });
    return {entry: entry, label: entry.label, python: cell.python, pins: cell.pins,
      changes: changes, steps: total, rank: [changes.length, total, downgrades, entry.label]};
  }

  function constraintApplies(constraint, stack) {  // compare.constraint_applies
    var yours = versionOf(stack, constraint.package);
    if (!knows(stack, constraint.package) || yours === null) { return false; }
    var hit;
    if (constraint.kind === "exclude") { hit = same(yours, constraint.versions[0]); }
    else {
      var mine = publicKey(yours);
      var bound = publicKey(constraint.kind === "below" ? constraint.versions[0] :
        constraint.versions[constraint.versions.length - 1]);
      if (mine === null || bound === null) { return false; }
      var order = compare(mine, bound);
      hit = constraint.kind === "below" ? order >= 0 : order <= 0;
    }
    return hit && constraint.when.every(function (pin) {
      return knows(stack, pin[0]) && same(versionOf(stack, pin[0]), pin[1]);
    });
  }

  function verdictOf(group, matches, constraints) {  // _verdict
    var ranked = matches.slice().sort(function (a, b) { return compare(a.rank, b.rank); });
    var exact = ranked.filter(function (m) { return !m.changes.length; });
    var shown, verdict;
    if (exact.length) {
      shown = exact;
      var outcomes = {};
      exact.forEach(function (m) { outcomes[m.entry.verdict] = true; });
      verdict = Object.keys(outcomes).length === 1 ? Object.keys(outcomes)[0] : "mixed";
    } else {
      var closest = ranked[0].rank.slice(0, 2);
      shown = ranked.filter(function (m) { return compare(m.rank.slice(0, 2), closest) === 0; });
      verdict = "untested";
    }
    if (constraints.length && verdict !== "broken") { verdict = "broken"; }
    var passing = ranked.filter(function (m) { return m.entry.verdict === "pass"; });
    var nearestPassing = passing.filter(function (m) {
      return compare(m.rank.slice(0, 3), passing[0].rank.slice(0, 3)) === 0;
    });
    if (exact.length && verdict === "pass") { nearestPassing = []; }
    var issues = [], byId = {};
    shown.forEach(function (m) {
      m.entry.issues.forEach(function (issue) {
        if (!Object.prototype.hasOwnProperty.call(byId, issue.id)) {
          byId[issue.id] = {issue: issue, labels: []};
          issues.push(byId[issue.id]);
        }
        byId[issue.id].labels.push(m.label);
      });
    });
    return {operation: group.operation, hardware: group.hardware, verdict: verdict,
      why: why(verdict, shown, exact.length > 0, constraints), exact: exact.length > 0,
      cells: shown, nearestPassing: nearestPassing, issues: issues, constraints: constraints};
  }

  function why(verdict, shown, exact, constraints) {  // _why
    var first = shown[0];
    if (!exact) {
      var count = first.changes.length;
      var far = first.steps + " version" + (first.steps !== 1 ? "s" : "") + " away" +
        (count > 1 ? " on " + count + " axes" : "");
      var cells = shown.length === 1 ? "the nearest cell is" :
        "the " + shown.length + " nearest cells are";
      var text = "no cell has your versions; " + cells + " " + far;
      if (constraints.length) {
        text += "; " + constraints[0].requirement + " (derived from the records) excludes yours";
      }
      return text;
    }
    if (verdict === "mixed" || shown.length > 1) {
      var keys = [];
      shown.forEach(function (m) {
        m.pins.forEach(function (v, k) { if (keys.indexOf(k) < 0) { keys.push(k); } });
      });
      var apart = keys.sort(compare).filter(function (k) {
        return distinct(shown.map(function (m) { return m.pins.get(k); })) > 1;
      });
      if (distinct(shown.map(function (m) { return m.python; })) > 1) { apart.push("python"); }
      return shown.length + " cells have your versions (they differ in " + apart.join(", ") +
        ", which your input does not name)" + (verdict === "mixed" ? " and disagree" : "");
    }
    return first.label + " (your versions) " + first.entry.what + ": " + first.entry.counts +
      first.entry.reason;
  }

  function distinct(values) {
    var seen = [];
    values.forEach(function (v) { if (seen.indexOf(v) < 0) { seen.push(v); } });
    return seen.length;
  }

  // -- The text, as report_text prints it ----------------------------------------------
  function value(version) { return version === null ? "(not installed)" : version; }

  function changeText(c) { return c.package + " " + value(c.yours) + " -> " + value(c.cell); }

  function distanceText(m) {  // Match.distance_text
    if (!m.changes.length) { return "your versions"; }
    var count = m.changes.length;
    return m.steps + " version" + (m.steps !== 1 ? "s" : "") + " away" +
      (count > 1 ? " on " + count + " axes" : "") + ": " + m.changes.map(changeText).join(", ");
  }

  function describe(m) {  // describe_match
    var where = m.changes.length ? "; " + m.changes.map(changeText).join(", ") : "";
    return m.label + " " + m.entry.what + ": " + m.entry.counts + m.entry.reason + where;
  }

  var SHOWN = 3;
  var VERDICT_ORDER = ["broken", "flaky", "mixed", "pass", "n/a", "untested"];

  function verdictText(v) {  // _verdict_text
    var lines = [v.operation + " on " + v.hardware + ": " + v.verdict + ": " + v.why];
    if (!v.exact || v.cells.length > 1) {
      v.cells.slice(0, SHOWN).forEach(function (m) {
        lines.push((v.exact ? "  " : "  nearest: ") + describe(m));
      });
      if (v.cells.length > SHOWN) {
        lines.push("  ... and " + (v.cells.length - SHOWN) + " more as near");
      }
    }
    lines.push.apply(lines, v.cells[0].entry.problems);
    v.issues.forEach(function (found) {
      var issue = found.issue;
      var where = v.exact ? "" : " (in " + found.labels.slice(0, SHOWN).join(", ") + ")";
      lines.push("  known issue " + issue.id + ": " + issue.title + " " + issue.upstream + where);
      if (issue.claim) { lines.push("    " + issue.claim); }
      if (issue.workaround) { lines.push("    workaround: " + issue.workaround); }
    });
    v.constraints.forEach(function (c) { lines.push(c.line); });
    v.nearestPassing.slice(0, SHOWN).forEach(function (m) {
      lines.push("  nearest passing: " + m.label + ", " + distanceText(m));
    });
    if (!v.nearestPassing.length && v.verdict !== "pass" && v.verdict !== "n/a") {
      lines.push("  nearest passing: none (no cell of the results passes it)");
    }
    return lines;
  }

  // check_stack and report_text for a pasted freeze: the lines check prints, or the
  // message of the error it stops with.
  function answer(packed, text, source) {
    try {
      var data = unpack(packed);
      var stack = parseFreeze(text, source);
      var axes = data.axes;
      if (!data.cells.length) {
        throw new UsageError(source + ": the report holds no records: nothing to compare with");
      }
      if (!axes.some(function (a) { return versionOf(stack, a) !== null || !knows(stack, a); })) {
        throw new UsageError(source + ": none of the packages the results test is installed (" +
          axes.join(", ") + "); is it the stack you meant?");
      }
      var compared = axes.filter(function (a) { return knows(stack, a); });
      var unknown = axes.filter(function (a) { return !knows(stack, a); }).concat(["python"]);
      var verdicts = data.groups.map(function (group) {
        var matches = group.cells.map(function (entry) {
          return match(data, stack, entry, compared);
        });
        var constraints = data.constraints.filter(function (c) {
          return c.group === group && constraintApplies(c, stack);
        });
        return verdictOf(group, matches, constraints);
      });
      var parts = compared.map(function (a) {
        var version = versionOf(stack, a);
        return version !== null ? a + " " + version : a + " not installed";
      });
      var unversioned = [];
      stack.unversioned.forEach(function (why, name) {
        unversioned.push(name + " (no version: " + why + ")");
      });
      var lines = ["stack: " + source + " (pip freeze): " + parts.join(", ") +
        "; Python not named" + (unversioned.length ? "; " + unversioned.join(", ") : "")];
      stack.notes.forEach(function (note) { lines.push("  note: " + note); });
      lines.push("compared on: " + compared.join(", ") +
        (unknown.length ? "; not named by your input: " + unknown.join(", ") : ""));
      var tally = {};
      verdicts.forEach(function (v) {
        lines.push("");
        lines.push.apply(lines, verdictText(v));
        tally[v.verdict] = (tally[v.verdict] || 0) + 1;
      });
      var summary = VERDICT_ORDER.filter(function (k) { return tally[k]; })
        .map(function (k) { return tally[k] + " " + k; }).join(", ");
      var broken = verdicts.filter(function (v) { return v.verdict === "broken"; })
        .map(function (v) { return v.operation + " on " + v.hardware; });
      lines.push("");
      lines.push("summary: " + (summary || "no verdict") + " (exit " + (broken.length ? 1 : 0) +
        (broken.length ? ": broken " + broken.join(", ") + ")" : ")"));
      return lines;
    } catch (error) {
      if (error instanceof UsageError) { return [error.message]; }
      throw error;
    }
  }

  root.ftmatrixStack = {
    answer: answer,
    parseFreeze: parseFreeze,
    version: {parse: parseVersion, publicText: publicText, compare: function (a, b) {
      var va = parseVersion(a), vb = parseVersion(b);
      return compare(sortKey(va, true), sortKey(vb, true));
    }, same: same, steps: steps}
  };
})(typeof window !== "undefined" ? window : globalThis);
