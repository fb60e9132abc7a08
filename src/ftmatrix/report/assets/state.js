// The view's state in the URL's fragment ("#a=transformers&b=trl&op=grpo"), so a link
// restores what its sender saw. A fragment without "=" is a plain anchor and is left alone.
var ftmatrixState = (function () {
  function read() {
    var out = {}, hash = location.hash.slice(1);
    if (hash.indexOf("=") < 0) { return out; }
    hash.split("&").forEach(function (part) {
      var at = part.indexOf("=");
      if (at > 0) {
        try {
          out[decodeURIComponent(part.slice(0, at))] = decodeURIComponent(part.slice(at + 1));
        } catch (e) { /* a mangled link: ignore that part */ }
      }
    });
    return out;
  }
  var current = read();
  return {
    get: function (key) {
      return Object.prototype.hasOwnProperty.call(current, key) ? current[key] : null;
    },
    set: function (changes) {
      Object.keys(changes).forEach(function (key) {
        var v = changes[key];
        if (v === null || v === undefined || v === "") { delete current[key]; }
        else { current[key] = String(v); }
      });
      var text = Object.keys(current).sort().map(function (key) {
        return encodeURIComponent(key) + "=" + encodeURIComponent(current[key]);
      }).join("&");
      history.replaceState(null, "", text ? "#" + text : location.pathname + location.search);
    },
    reload: function () { current = read(); return current; }
  };
})();
