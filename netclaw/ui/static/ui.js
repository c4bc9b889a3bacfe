// netclaw's control room: the live part of a session page, and error notes for htmx.
// Everything here is an enhancement: without it the pages read and the forms post.
// Text from the daemon only ever goes into textContent, never into HTML.
(function () {
  "use strict";

  function signal(name) {
    // Fragments listen with hx-trigger="NAME from:body" and fetch themselves again.
    document.body.dispatchEvent(new CustomEvent(name, { bubbles: true }));
  }

  function element(tag, cls, text) {
    var node = document.createElement(tag);
    if (cls) node.className = cls;
    if (text !== undefined) node.textContent = text;
    return node;
  }

  function follow(live) {
    var source = new EventSource(live.dataset.events);
    var bubble = null; // the reply being written
    var calls = {}; // tool call id -> its <details>
    var done = []; // live entries of finished turns, dropped once the transcript has them
    var joins = 0;

    function add(node) {
      live.appendChild(node);
      return node;
    }

    function on(name, handle) {
      source.addEventListener(name, function (event) {
        var data;
        try {
          data = JSON.parse(event.data);
        } catch (e) {
          return;
        }
        handle(data);
      });
    }

    function reply() {
      if (bubble === null) {
        bubble = add(element("article", "entry assistant live-text"));
        bubble.appendChild(element("header", null, "assistant"));
        bubble.text = bubble.appendChild(element("div", "text", ""));
      }
      return bubble;
    }

    on("joined", function () {
      // A reconnect (the daemon restarted, the network came back): catch up from the record.
      if (joins++ > 0) signal("transcript-changed");
      signal("status-changed");
      signal("approvals-changed");
    });
    on("text_delta", function (d) {
      reply().text.appendChild(document.createTextNode(d.delta));
    });
    on("text", function (d) {
      var b = reply();
      b.text.textContent = d.text;
      b.classList.add("done");
      b.dataset.turn = d.turn;
    });
    on("thinking", function (d) {
      var details = add(element("details", "entry thinking"));
      details.appendChild(element("summary", null, "thinking"));
      details.appendChild(element("pre", null, d.text));
    });
    on("tool_call", function (d) {
      bubble = null; // text after the tools is a new paragraph
      var details = add(element("details", "entry tool live-tool"));
      details.dataset.call = d.id;
      var summary = details.appendChild(element("summary", null, "tool "));
      summary.appendChild(element("strong", null, d.name));
      details.state = summary.appendChild(element("span", "tool-state", " · running"));
      details.appendChild(element("h4", null, "arguments"));
      details.appendChild(element("pre", null, d.arguments));
      calls[d.id] = details;
    });
    on("tool_result", function (d) {
      var details = calls[d.id];
      if (!details) return;
      details.state.textContent = d.is_error ? " · failed" : " · done";
      if (d.is_error) details.classList.add("failed");
      details.appendChild(element("h4", null, "result"));
      details.appendChild(element("pre", "result", d.content));
    });
    on("approval_requested", function (d) {
      add(element("p", "entry notice", "Waiting for approval of " + d.tool + "."));
      signal("approvals-changed");
    });
    on("approval_decided", function (d) {
      add(element("p", "entry notice", "Decided: " + d.decision + " by " + d.by + "."));
      signal("approvals-changed");
    });
    on("notice", function (d) {
      add(element("p", "entry notice", d.text));
    });
    on("compaction", function (d) {
      add(element("p", "entry marker", "Compacted: " + d.tokens_before + " → " + d.tokens_after +
        " tokens" + (d.summarized ? ", older turns summarised" : "") +
        (d.memories_saved ? ", " + d.memories_saved + " memories saved" : "") + "."));
    });
    on("history_trimmed", function (d) {
      add(element("p", "entry marker", "Trimmed " + d.dropped_turns + " old turn(s) to fit the window (" +
        d.tokens_before + " → " + d.tokens_after + " tokens)."));
    });
    on("session_reset", function (d) {
      add(element("p", "entry marker", "Reset by " + d.by + ": the model starts afresh here."));
    });
    on("error", function (d) {
      add(element("p", "entry failure", d.message + " (" + d.code + ")"));
    });
    // The last phase the stream told. A status fragment asked for before it may answer after
    // it, with the phase before (a busy daemon): the stream's is shown again over it. One
    // asked for later that is newer than the stream only runs ahead of an event on its way.
    var livePhase = null;
    function showPhase() {
      var phase = document.getElementById("phase");
      if (phase && livePhase !== null) {
        phase.textContent = livePhase;
        phase.className = "phase phase-" + livePhase;
      }
    }
    on("phase", function (d) {
      livePhase = d.to;
      showPhase();
      signal("status-changed"); // turns, queue and context as they are now
    });
    on("usage", function (d) {
      var meter = document.querySelector("#context meter");
      if (meter) {
        meter.max = d.context_window;
        meter.value = d.input_tokens;
      }
    });
    on("title", function (d) {
      var title = document.getElementById("session-title");
      if (title) title.textContent = d.title;
    });
    on("turn_completed", function () {
      bubble = null;
      done = done.concat(Array.prototype.slice.call(live.children));
      signal("transcript-changed");
    });

    // Again once the swap settled: htmx puts the new fragment's attributes (its class) back then.
    document.body.addEventListener("htmx:afterSettle", showPhase);
    document.body.addEventListener("htmx:afterSwap", function (event) {
      showPhase();
      if (event.target && event.target.id === "recorded") {
        done.forEach(function (node) {
          if (node.parentNode === live) live.removeChild(node);
        });
        done = [];
      }
    });
  }

  function noteErrors() {
    // htmx does not swap error answers: say what went wrong instead.
    document.body.addEventListener("htmx:responseError", function (event) {
      var xhr = event.detail.xhr;
      var text = "Error " + xhr.status;
      try {
        var page = new DOMParser().parseFromString(xhr.responseText, "text/html");
        var flash = page.querySelector(".flash");
        if (flash) text = flash.textContent;
      } catch (e) {
        /* keep the status */
      }
      if (xhr.status === 401) {
        window.location.href = "/ui/login?next=" + encodeURIComponent(window.location.pathname);
        return;
      }
      var box = document.getElementById("toast") || document.body.appendChild(element("div", "toast"));
      box.id = "toast";
      box.setAttribute("role", "alert");
      box.textContent = text;
    });
  }

  function start() {
    noteErrors();
    var live = document.getElementById("live");
    if (live && window.EventSource) follow(live);
    var message = document.getElementById("message");
    if (message) {
      // Sent with htmx: empty the box for the next message.
      document.body.addEventListener("htmx:afterRequest", function (event) {
        if (event.detail.successful && event.target.classList.contains("send")) message.value = "";
      });
    }
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
