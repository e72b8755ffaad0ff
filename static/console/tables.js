// Click a header of a `table.sortable` to sort by that column (numbers by data-sort when present).
(function () {
  function value(cell) {
    const raw = cell.dataset.sort !== undefined ? cell.dataset.sort : cell.textContent.trim();
    const num = parseFloat(raw);
    return isNaN(num) || !/^-?[\d.]+/.test(raw) ? raw.toLowerCase() : num;
  }
  document.querySelectorAll("table.sortable").forEach(function (table) {
    table.querySelectorAll("thead th").forEach(function (th, index) {
      th.addEventListener("click", function () {
        const asc = th.getAttribute("aria-sort") !== "ascending";
        table.querySelectorAll("thead th").forEach(function (h) { h.removeAttribute("aria-sort"); });
        th.setAttribute("aria-sort", asc ? "ascending" : "descending");
        const body = table.tBodies[0];
        const rows = Array.from(body.rows).filter(function (r) { return r.cells.length > index; });
        rows.sort(function (a, b) {
          const x = value(a.cells[index]), y = value(b.cells[index]);
          return (x < y ? -1 : x > y ? 1 : 0) * (asc ? 1 : -1);
        });
        rows.forEach(function (r) { body.appendChild(r); });
      });
    });
  });
})();
