// edgerelay console: progressive enhancement only. Every page works
// without this file; it adds a "select all" box to the search results.
document.addEventListener("DOMContentLoaded", function () {
  var form = document.getElementById("results-form");
  if (!form) return;
  var boxes = form.querySelectorAll('input[name="id"][type="checkbox"]');
  if (boxes.length < 2) return;
  var label = document.createElement("label");
  var all = document.createElement("input");
  all.type = "checkbox";
  all.id = "select-all";
  label.htmlFor = "select-all";
  label.textContent = " Select all retryable on this page";
  all.addEventListener("change", function () {
    boxes.forEach(function (b) { b.checked = all.checked; });
  });
  var p = document.createElement("p");
  p.appendChild(all);
  p.appendChild(label);
  form.insertBefore(p, form.firstChild);
});
