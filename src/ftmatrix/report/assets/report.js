(function () {
  // A link to a failure opens its <details>. At the click itself, not only at the
  // hashchange after it: a view-state write due in between (the filter's, 120 ms after
  // typing) replaces the fragment, and the hashchange would then find no target.
  function open(fragment, scroll) {
    var id;
    try { id = fragment && decodeURIComponent(fragment.slice(1)); } catch (e) { return; }
    var target = id && document.getElementById(id);
    if (target && target.tagName === "DETAILS") {
      target.open = true;
      if (scroll) { target.scrollIntoView(); }
    }
  }
  window.addEventListener("hashchange", function () { open(location.hash, true); });
  document.addEventListener("click", function (event) {
    var link = event.target.closest ? event.target.closest("a[href^='#']") : null;
    if (link) { open(link.getAttribute("href"), false); }  // the browser scrolls to it
  });
  open(location.hash, true);
  // "Does my stack work?": ftmatrix check's answer, by stack.js, from the embedded data.
  var button = document.getElementById("check");
  var source = document.getElementById("stack-data");
  if (button && source && window.ftmatrixStack) {
    button.addEventListener("click", function () {
      var data = JSON.parse(source.textContent);
      var text = document.getElementById("freeze").value;
      var out = document.getElementById("verdict");
      var answer = document.createElement("pre");
      answer.className = "check";
      answer.textContent = window.ftmatrixStack.answer(data, text, "your pip freeze").join("\n");
      out.textContent = "";
      out.appendChild(answer);
    });
  }
})();
