// Ask before a destructive button submits: any element with data-confirm="question" (delete, pause, revoke).
(function () {
  document.addEventListener("click", function (event) {
    const button = event.target.closest("[data-confirm]");
    if (button && !window.confirm(button.dataset.confirm)) {
      event.preventDefault();
      event.stopImmediatePropagation();
    }
  }, true);
})();
