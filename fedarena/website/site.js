// The leaderboard's table: click a column header to sort by it (again to reverse); the text box and the two
// menus hide the rows that do not match. Cells sort by their data-sort value (numbers as numbers, empty last).
(function () {
  "use strict";
  function sortKey(cell) {
    var raw = cell.getAttribute("data-sort");
    if (raw === null) { raw = cell.textContent.trim(); }
    var value = parseFloat(raw);
    return { text: raw.toLowerCase(), num: isNaN(value) ? null : value, empty: raw === "" };
  }
  function compare(a, b, descending) {
    if (a.empty !== b.empty) { return a.empty ? 1 : -1; }
    var order;
    if (a.num !== null && b.num !== null) { order = a.num - b.num; }
    else { order = a.text < b.text ? -1 : (a.text > b.text ? 1 : 0); }
    return descending ? -order : order;
  }
  function sortBy(table, index, header) {
    var body = table.tBodies[0];
    var descending = header.getAttribute("aria-sort") === "ascending";
    var headers = table.tHead.rows[0].cells;
    for (var h = 0; h < headers.length; h++) { headers[h].removeAttribute("aria-sort"); }
    header.setAttribute("aria-sort", descending ? "descending" : "ascending");
    var rows = Array.prototype.slice.call(body.rows);
    rows.sort(function (r1, r2) {
      return compare(sortKey(r1.cells[index]), sortKey(r2.cells[index]), descending) ||
        (parseInt(r1.getAttribute("data-order"), 10) - parseInt(r2.getAttribute("data-order"), 10));
    });
    rows.forEach(function (row) { body.appendChild(row); });
  }
  function applyFilters(table) {
    var text = (document.getElementById("filter-text") || { value: "" }).value.trim().toLowerCase();
    var kind = (document.getElementById("filter-kind") || { value: "" }).value;
    var status = (document.getElementById("filter-status") || { value: "" }).value;
    var shown = 0;
    Array.prototype.forEach.call(table.tBodies[0].rows, function (row) {
      var keep = (!text || row.textContent.toLowerCase().indexOf(text) !== -1) &&
        (!kind || row.getAttribute("data-kind") === kind) && (!status || row.getAttribute("data-status") === status);
      row.hidden = !keep;
      if (keep) { shown += 1; }
    });
    var count = document.getElementById("shown-count");
    if (count) { count.textContent = String(shown); }
  }
  document.addEventListener("DOMContentLoaded", function () {
    var table = document.getElementById("leaderboard");
    if (!table) { return; }
    Array.prototype.forEach.call(table.tHead.rows[0].cells, function (header, index) {
      header.classList.add("sortable");
      header.addEventListener("click", function () { sortBy(table, index, header); });
    });
    ["filter-text", "filter-kind", "filter-status"].forEach(function (id) {
      var control = document.getElementById(id);
      if (control) { control.addEventListener("input", function () { applyFilters(table); }); }
    });
    applyFilters(table);
  });
})();
