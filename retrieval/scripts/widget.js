/* The knowledge base's Ask widget. One tag on any page:
     <script src="https://kb.example.com/widget.js" async></script>
   puts an Ask box after the tag (data-target="#css-selector": into that element).
   data-key: a widget key, for sources that are not public; data-sources: source
   ids, comma-separated, to ask fewer; data-label: the box's label. Theme it with
   the --kb-* CSS variables (docs/editors.md). Every text it receives is set as
   text, never as HTML, but the answer's HTML, which the knowledge base renders
   and escapes itself (retrieval/rendering.py). */
(function () {
  "use strict";
  var script = document.currentScript;
  if (!script || !window.fetch || !Element.prototype.attachShadow) return;
  var data = script.dataset;
  var endpoint = new URL("api/widget/query/", script.src).href;
  var rated = new URL("api/widget/feedback/", script.src).href;
  var CSS =
    ":host{all:initial;display:block;font:var(--kb-font-size,16px)/1.5 var(--kb-font,system-ui,sans-serif);color:var(--kb-text,#1d1d1f)}" +
    "*{box-sizing:border-box}" +
    ".box{background:var(--kb-bg,#fff);border:1px solid var(--kb-border,#d0d4dc);border-radius:var(--kb-radius,8px);padding:.75em 1em}" +
    "label{display:block;font-weight:600;margin-bottom:.35em}" +
    ".row{display:flex;gap:.5em}" +
    "input{flex:1;min-width:0;font:inherit;color:inherit;background:var(--kb-bg,#fff);padding:.45em .7em;border:1px solid var(--kb-border,#d0d4dc);border-radius:var(--kb-radius,8px)}" +
    "button{font:inherit;padding:.45em 1em;border:0;border-radius:var(--kb-radius,8px);background:var(--kb-accent,#1f5fbf);color:var(--kb-accent-text,#fff);cursor:pointer}" +
    "button:disabled{opacity:.6;cursor:progress}" +
    ":focus-visible{outline:3px solid var(--kb-focus,#ffbf47);outline-offset:2px}" +
    ".answer{background:var(--kb-answer-bg,#f4f6fa);border-left:4px solid var(--kb-accent,#1f5fbf);padding:.1em 1em;margin:.75em 0}" +
    ".abstained{border-left-color:var(--kb-warning,#b26b00)}" +
    "p{margin:.5em 0}img{max-width:100%}" +
    "pre{background:var(--kb-bg,#fff);border:1px solid var(--kb-border,#d0d4dc);border-radius:4px;padding:.5em .75em;overflow-x:auto}" +
    "code{font:.9em/1.4 var(--kb-mono,ui-monospace,Menlo,monospace)}" +
    "a{color:var(--kb-link,#1f5fbf)}a.marker{text-decoration:none;font-size:.8em;vertical-align:super}" +
    "h1,h2,h3,h4,h5,h6{font-size:1em;margin:.75em 0 .25em}ol,ul{margin:0;padding-left:1.4em}li{margin-bottom:.6em}" +
    "table{border-collapse:collapse}td,th{border:1px solid var(--kb-border,#d0d4dc);padding:.2em .5em}" +
    ".meta{color:var(--kb-muted,#555);font-size:.875em}.error{color:var(--kb-error,#b00020)}" +
    ".feedback{display:flex;flex-wrap:wrap;gap:.5em;align-items:center;margin:.5em 0}" +
    ".feedback button{background:none;color:var(--kb-link,#1f5fbf);border:1px solid var(--kb-border,#d0d4dc);padding:.15em .7em;font-size:.875em}" +
    ".feedback button:disabled{cursor:default}.feedback button[aria-pressed=true]{opacity:1;font-weight:600}";

  var host = document.createElement("div");
  host.className = "kb-ask";
  // After the tag, or in data-target, or (a tag in the head) at the body's end.
  function place() {
    var target = data.target && document.querySelector(data.target);
    var parent = script.parentNode;
    if (target) target.appendChild(host);
    else if (parent && parent !== document.head) parent.insertBefore(host, script.nextSibling);
    else document.body.appendChild(host);
  }
  if (document.readyState === "loading" && (data.target || script.parentNode === document.head)) {
    document.addEventListener("DOMContentLoaded", place);
  } else place();
  var root = host.attachShadow({mode: "open"});
  root.innerHTML = "<style>" + CSS + "</style><div class=box part=box>" +
    "<form role=search><label for=q></label><div class=row>" +
    "<input id=q name=q type=text maxlength=2000 required autocomplete=off>" +
    "<button type=submit>Ask</button></div></form>" +
    "<div class=out aria-live=polite></div></div>";
  var form = root.querySelector("form"), input = root.querySelector("input");
  var button = root.querySelector("button"), out = root.querySelector(".out");
  root.querySelector("label").textContent = data.label || "Ask the documentation";

  function el(tag, cls, text) {
    var node = document.createElement(tag);
    if (cls) node.className = cls;
    if (text != null) node.textContent = text;
    return node;
  }
  function show(node) {
    out.textContent = "";
    out.appendChild(node);
  }
  function error(text) {
    show(el("p", "error", text));
  }
  function web(url) {
    return /^https?:\/\//i.test(url || "") ? url : "about:blank";
  }

  var UNITS = [["year", 31536e3], ["month", 2592e3], ["week", 6048e2],
    ["day", 864e2], ["hour", 3600], ["minute", 60]];
  var relative = window.Intl && Intl.RelativeTimeFormat &&
    new Intl.RelativeTimeFormat("en", {numeric: "auto"});
  function ago(at) {
    var seconds = (at - Date.now()) / 1000;
    for (var i = 0; i < UNITS.length; i++) {
      if (Math.abs(seconds) >= UNITS[i][1]) {
        return relative.format(Math.round(seconds / UNITS[i][1]), UNITS[i][0]);
      }
    }
    return "just now";
  }
  function when(label, iso) {
    var at = Date.parse(iso || ""), span = el("span", "", label + " ");
    if (isNaN(at)) return (span.textContent += "never"), span;
    var time = el("time", "", relative ? ago(at) : new Date(at).toLocaleDateString());
    time.dateTime = iso;
    time.title = new Date(at).toLocaleString();
    span.appendChild(time);
    return span;
  }

  function post(url, body) {
    if (data.key) body.key = data.key;
    return fetch(url, {
      method: "POST", mode: "cors", credentials: "omit",
      headers: {"Content-Type": "application/json"}, body: JSON.stringify(body)
    });
  }

  // Useful / Not useful under an answer, named by the ticket it came with (the
  // reader is anonymous: the ticket is their proof the answer was theirs).
  function rating(ticket) {
    var box = el("div", "feedback"), said = el("span", "meta", "Was this answer useful?");
    box.appendChild(said);
    var buttons = [["Useful", true], ["Not useful", false]].map(function (choice) {
      var button = box.appendChild(el("button", "", choice[0]));
      button.type = "button";
      button.addEventListener("click", function () { rate(button, choice[1]); });
      return button;
    });
    function rate(button, helpful) {
      buttons.forEach(function (b) { b.disabled = true; });
      button.setAttribute("aria-pressed", "true");  // what was said stays legible
      post(rated, {ticket: ticket, helpful: helpful}).then(function (response) {
        return response.ok;
      }, function () { return false; }).then(function (ok) {
        said.textContent = ok ? "Thanks for the feedback." : "The feedback could not be saved.";
        if (ok) return;
        button.removeAttribute("aria-pressed");
        buttons.forEach(function (b) { b.disabled = false; });
      });
    }
    return box;
  }

  function answered(result) {
    var cites = result.citations || [], all = document.createDocumentFragment();
    var answer = el("div", result.abstained ? "answer abstained" : "answer");
    // HTML the knowledge base rendered as its Ask page does (raw HTML in the
    // answer's text escaped, only http(s) links, each [n] to the cited section):
    // one renderer for both, and this script's own server its only author.
    answer.innerHTML = result.answer_html || "";
    all.appendChild(answer);
    if (!result.abstained && result.ticket) all.appendChild(rating(result.ticket));
    if (cites.length) {
      all.appendChild(el("h3", "", "Sources"));
      var list = all.appendChild(el("ol", "cites"));
      cites.forEach(function (cite) {
        var item = list.appendChild(el("li"));
        item.appendChild(el("a", "", cite.title || cite.url)).href = web(cite.section_url);
        if (cite.section) item.appendChild(el("span", "meta", " › " + cite.section));
        if (cite.excerpt) item.appendChild(el("div", "", cite.excerpt));
        if (cite.pinned_at) {
          item.appendChild(el("div", "meta pinned", "Chosen by the documentation's editors for questions like this one."));
        }
        var fresh = item.appendChild(el("div", "meta"));
        fresh.appendChild(when("verified", cite.last_verified_at));
        fresh.appendChild(document.createTextNode(", "));
        fresh.appendChild(when("changed", cite.last_changed_at));
      });
    }
    show(all);
  }

  function refused(response, body) {
    if (response.status === 429) {
      var wait = response.headers.get("Retry-After") || "a few";
      return error("Too many questions from your network: ask again in " + wait + " seconds.");
    }
    error(body.detail || "The knowledge base answered " + response.status + ".");
  }

  // A refused site gets no CORS header, so its page cannot read why: a request
  // its page may not read (no-cors) tells a refusal from an unreachable server.
  function unreadable() {
    return fetch(script.src, {mode: "no-cors", cache: "no-store", credentials: "omit"})
      .then(function () {
        error("This site (" + location.origin + ") is not allowed to ask this " +
          "knowledge base. Its editors can allow it.");
      }, function () {
        error("The knowledge base cannot be reached. Please try again later.");
      });
  }

  form.addEventListener("submit", function (event) {
    event.preventDefault();
    var question = input.value.trim();
    if (!question) return;
    var body = {question: question};
    if (data.sources) body.sources = data.sources.split(",").map(Number).filter(Boolean);
    button.disabled = true;
    out.setAttribute("aria-busy", "true");
    show(el("p", "meta", "Looking for an answer…"));
    post(endpoint, body).then(function (response) {
      return response.json().catch(function () { return {}; }).then(function (json) {
        return response.ok ? answered(json) : refused(response, json);
      });
    }, unreadable).then(function () {
      button.disabled = false;
      out.removeAttribute("aria-busy");
    });
  });
})();
