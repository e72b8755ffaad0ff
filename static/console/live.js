// Websockets that come back: after a drop, reconnect with exponential backoff (1 s doubling to 30 s, with
// jitter) and ask for what was missed (`since`, the last timestamp the page holds). Consumers also send
// the current state on every connect, so a page that was away is current again without a reload.
window.LantauLive = (function () {
  const scheme = location.protocol === "https:" ? "wss://" : "ws://";
  function open(path, options) {
    let delay = 1000, socket = null, stopped = false;
    const status = options.status ? document.getElementById(options.status) : null;
    function say(text, state) {
      if (!status) return;
      status.textContent = text; status.dataset.state = state;
    }
    function connect() {
      const since = options.since ? options.since() : 0;
      const url = scheme + location.host + path + (since ? "?since=" + encodeURIComponent(since) : "");
      socket = new WebSocket(url);
      socket.onopen = function () {
        delay = 1000;
        say("", "live");
        if (since) socket.send(JSON.stringify({since: since}));
      };
      socket.onmessage = function (event) { options.onMessage(JSON.parse(event.data)); };
      socket.onclose = function (event) {
        if (stopped) return;
        if (event.code >= 4400 && event.code < 4500) {  // refused: signed out or not a member; do not hammer
          say("Live updates are not available (code " + event.code + "); reload the page.", "refused");
          return;
        }
        const wait = Math.round(delay * (0.8 + Math.random() * 0.4));
        say("Connection lost; reconnecting in " + Math.max(1, Math.round(wait / 1000)) + " s…", "reconnecting");
        setTimeout(connect, wait);
        delay = Math.min(delay * 2, 30000);
      };
    }
    if (window.WebSocket) connect();
    return {
      close: function () { stopped = true; if (socket) socket.close(); },
      socket: function () { return socket; },
    };
  }
  return {open: open};
})();
