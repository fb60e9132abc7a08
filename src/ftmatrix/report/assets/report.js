(function () {
  function openTarget() {
    var id = location.hash && decodeURIComponent(location.hash.slice(1));
    var target = id && document.getElementById(id);
    if (target && target.tagName === "DETAILS") { target.open = true; target.scrollIntoView(); }
  }
  window.addEventListener("hashchange", openTarget);
  openTarget();
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
