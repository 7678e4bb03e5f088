// Progressive enhancement for the static site: copy buttons and client-side search.
// Everything taken from the search shards goes into the page as text (textContent), never as HTML.
(function () {
  "use strict";
  var root = document.body.getAttribute("data-root") || "";

  // The button's name stays "Copy the npm command" for screen readers, so "Copied" is also said
  // through a status region (one that is in the page before anything is said in it).
  var copyButtons = document.querySelectorAll("button[data-copy]");
  var announcer = null;
  if (copyButtons.length) {
    announcer = document.createElement("p");
    announcer.className = "visually-hidden";
    announcer.id = "copy-status";
    announcer.setAttribute("role", "status");
    document.body.appendChild(announcer);
  }

  function copyText(text, button) {
    var done = function () {
      // The label from before the first press: a second press within the delay keeps "Copy".
      var label = button.getAttribute("data-label") || button.textContent;
      button.setAttribute("data-label", label);
      button.textContent = "Copied";
      announcer.textContent = "Copied: " + text;
      clearTimeout(button.copyTimer);
      button.copyTimer = setTimeout(function () { button.textContent = label; }, 1200);
    };
    if (navigator.clipboard && window.isSecureContext) {
      navigator.clipboard.writeText(text).then(done, function () {});
      return;
    }
    var area = document.createElement("textarea");
    area.value = text;
    document.body.appendChild(area);
    area.select();
    try { document.execCommand("copy"); done(); } catch (e) { /* nothing to do */ }
    document.body.removeChild(area);
  }

  copyButtons.forEach(function (button) {
    button.addEventListener("click", function () {
      var source = document.getElementById(button.getAttribute("data-copy"));
      if (source) copyText(source.textContent, button);
    });
  });

  // A box that scrolls sideways (a code block, a wide table) joins the Tab order while it
  // overflows, so that the arrow keys can scroll it in every browser (Safari does not do it by
  // itself); one that holds a link or a button is reached through it already.
  function keyboardScrollers() {
    document.querySelectorAll("pre, .readme table, .table-scroll, .install code").forEach(function (box) {
      var owned = box.hasAttribute("data-scroll-focus");
      if (!owned && (box.hasAttribute("tabindex") || box.querySelector("a[href], button, input, [tabindex]"))) return;
      if (box.scrollWidth > box.clientWidth) {
        box.setAttribute("tabindex", "0");
        box.setAttribute("data-scroll-focus", "");
      } else if (owned) {
        box.removeAttribute("tabindex");
        box.removeAttribute("data-scroll-focus");
      }
    });
  }
  keyboardScrollers();
  var resized = null;
  window.addEventListener("resize", function () { clearTimeout(resized); resized = setTimeout(keyboardScrollers, 150); });

  // Download counts (`registry-gen stats` writes them beside the page): the week's total, and
  // each version's in its row. Before any count, the file says nothing and nothing is shown.
  var downloads = document.getElementById("downloads");
  if (downloads && window.fetch) {
    fetch(downloads.getAttribute("data-downloads"), { credentials: "same-origin" })
      .then(function (reply) { return reply.ok ? reply.json() : null; })
      .then(function (counts) {
        if (!counts || !counts["last-week"]) return;
        document.getElementById("weekly-downloads").textContent = Number(counts["last-week"].downloads).toLocaleString("en");
        downloads.hidden = false;
        var versions = counts.versions || {};
        Object.keys(versions).forEach(function (version) {
          var row = document.getElementById("v-" + version);
          if (!row) return;
          var note = document.createElement("div");
          note.className = "muted version-downloads";
          note.textContent = Number(versions[version]).toLocaleString("en") + " downloads this week";
          row.cells[0].appendChild(note);
        });
      }, function () { /* no counts: nothing to show */ });
  }

  // Not-found page: name what was asked for and offer a search for it.
  var missing = document.getElementById("not-found");
  if (missing) {
    var webRoot = missing.getAttribute("data-web-root");
    var path = decodeURIComponent(location.pathname);
    var detail = document.getElementById("not-found-detail");
    var link = document.createElement("a");
    // A version page (package/<name>/v/<version>/[files/]) of a version that is not here.
    var version = /\/-\/web\/package\/(.+)\/v\/([^/]+)(?:\/files)?\/?(?:index\.html)?$/.exec(path);
    var match = /\/-\/web\/package\/(.+?)\/?(?:index\.html)?$/.exec(path);
    if (version && /\/files\/?(?:index\.html)?$/.test(location.pathname)) {
      // A version's file list was a page of its own; it is now the Code tab of the version's page.
      location.replace(location.pathname.replace(/\/files\/?(?:index\.html)?$/, "/index.html") + "#code");
    } else if (version) {
      detail.textContent = "There is no version " + version[2] + " of " + version[1] + " in this registry. ";
      link.href = webRoot + "package/" + version[1] + "/index.html";
      link.textContent = "See the versions it has";
      detail.appendChild(link);
    } else if (match) {
      detail.textContent = "There is no package called " + match[1] + " in this registry. ";
      link.href = webRoot + "index.html?q=" + encodeURIComponent(match[1]);
      link.textContent = "Search for it";
      detail.appendChild(link);
    }
  }

  var form = document.getElementById("search");
  if (!form) return;
  var input = document.getElementById("q");
  var topInput = document.getElementById("top-q");
  var status = document.getElementById("search-status");
  var results = document.getElementById("search-results");
  var list = document.getElementById("search-list");
  var browse = document.getElementById("browse");
  var MAX_SHOWN = 200;
  var DESCRIPTION_KEY_LENGTH = 3; // registry_gen.site_search.DESCRIPTION_KEY_LENGTH
  var shards = {}; // shard key -> promise of its packages (a missing shard holds none)

  // Words as the build cuts them (registry_gen.site_search.search_tokens): lower-case runs of a-z0-9.
  function tokens(text) {
    return String(text).toLowerCase().split(/[^a-z0-9]+/).filter(Boolean);
  }

  function words(texts, shortest) {
    var found = [];
    texts.forEach(function (t) { found = found.concat(tokens(t).filter(function (w) { return w.length >= shortest; })); });
    return found;
  }

  function prepare(p) {
    p.lowerName = p.name.toLowerCase();
    p.nameWords = words([p.name], 2);
    p.keywordWords = words(p.keywords, 2);
    p.maintainerWords = words(p.maintainers, 2);
    p.descriptionWords = words([p.description], DESCRIPTION_KEY_LENGTH);
    p.haystack = [p.name, p.description, p.keywords.join(" "), p.maintainers.join(" ")].join("\n").toLowerCase();
    return p;
  }

  function getJson(url) {
    return fetch(url).then(function (response) {
      if (response.status === 404) return { packages: [] }; // no package has a word starting so
      if (!response.ok) throw new Error("HTTP " + response.status);
      return response.json();
    });
  }

  // A shard is fetched by key: -/web/search/<key>.json. A shard that more packages share than one
  // file should hold lists its leaves instead: <key>/<id>.json each.
  function loadShard(key) {
    if (!shards[key]) {
      var base = form.getAttribute("data-shards");
      shards[key] = getJson(base + key + ".json")
        .then(function (data) {
          if (!data.leaves) return data.packages;
          return Promise.all(data.leaves.map(function (id) {
            return getJson(base + key + "/" + encodeURIComponent(id) + ".json");
          })).then(function (leaves) {
            return [].concat.apply([], leaves.map(function (leaf) { return leaf.packages; }));
          });
        })
        .then(function (packages) { return packages.map(prepare); });
      shards[key].catch(function () { delete shards[key]; });
    }
    return shards[key];
  }

  function startingWith(list, lead) {
    for (var i = 0; i < list.length; i++) if (list[i].indexOf(lead) === 0) return list[i];
    return null;
  }

  // Why package `p` matches the first word `lead` of `query`, the best reason first (its rank):
  // its exact name, the start of its name, a word of its name, of a keyword, of a maintainer, of
  // its description (a lead of three characters or more, as the build keys description words).
  // Null when nothing of it starts with the lead.
  function why(p, lead, query) {
    if (p.lowerName === query) return { rank: 0, text: "exact name" };
    if (p.lowerName.indexOf(query) === 0 || p.lowerName.replace(/^@/, "").indexOf(lead) === 0) {
      return { rank: 1, text: "name starts with “" + lead + "”" };
    }
    var word = startingWith(p.nameWords, lead);
    if (word) return { rank: 2, text: "word of the name “" + word + "”" };
    word = startingWith(p.keywordWords, lead);
    if (word) return { rank: 3, text: "keyword “" + word + "”" };
    word = startingWith(p.maintainerWords, lead);
    if (word) return { rank: 4, text: "maintainer “" + word + "”" };
    word = lead.length >= DESCRIPTION_KEY_LENGTH ? startingWith(p.descriptionWords, lead) : null;
    if (word) return { rank: 5, text: "description word “" + word + "”" };
    return null;
  }

  // The first word of two characters or more picks the shards (its first two characters', and
  // from three characters on its first three's, which hold description words) and must start a
  // word of the package; every other word must appear anywhere in its name, description,
  // keywords or maintainers.
  function plan(text) {
    var all = tokens(text);
    var lead = all.filter(function (w) { return w.length >= 2; })[0];
    if (!lead) return null;
    var rest = all.slice();
    rest.splice(all.indexOf(lead), 1);
    var keys = [lead.slice(0, 2)];
    if (lead.length >= DESCRIPTION_KEY_LENGTH) keys.push(lead.slice(0, DESCRIPTION_KEY_LENGTH));
    return { lead: lead, keys: keys, rest: rest };
  }

  // The packages of the shards (one package may be in several) that match, best reason first,
  // by name within a reason; each with the reason it is shown with.
  function search(packages, wanted, text) {
    var query = text.trim().toLowerCase();
    var seen = {};
    var found = [];
    packages.forEach(function (p) {
      if (seen[p.name]) return;
      seen[p.name] = true;
      var reason = why(p, wanted.lead, query);
      if (reason && wanted.rest.every(function (term) { return p.haystack.indexOf(term) >= 0; })) {
        found.push({ p: p, reason: reason });
      }
    });
    found.sort(function (a, b) {
      return a.reason.rank - b.reason.rank || (a.p.name < b.p.name ? -1 : a.p.name > b.p.name ? 1 : 0);
    });
    return found;
  }

  // For the tests of the ranking (tests/site): the pure part of the search, on plain records.
  window.registrySearch = function (records, text) {
    var wanted = plan(text);
    if (!wanted) return [];
    return search(records.map(prepare), wanted, text).map(function (m) { return { name: m.p.name, rank: m.reason.rank, why: m.reason.text }; });
  };

  function entry(match) {
    var p = match.p;
    var item = document.createElement("li");
    item.className = "package";
    var head = document.createElement("div");
    head.className = "package-head";
    var link = document.createElement("a");
    link.className = "package-name";
    link.href = root + "package/" + p.name.split("/").map(encodeURIComponent).join("/") + "/index.html";
    link.textContent = p.name;
    var version = document.createElement("span");
    version.className = "version";
    version.textContent = p.version;
    head.appendChild(link);
    head.appendChild(version);
    item.appendChild(head);
    if (p.description) {
      var description = document.createElement("p");
      description.className = "description";
      description.textContent = p.description;
      item.appendChild(description);
    }
    if (p.keywords.length) {
      var meta = document.createElement("p");
      meta.className = "meta";
      meta.textContent = p.keywords.join(", ");
      item.appendChild(meta);
    }
    var reason = document.createElement("p");
    reason.className = "meta why";
    reason.textContent = "Match: " + match.reason.text;
    item.appendChild(reason);
    return item;
  }

  // The status says which query it answers too, like the list: a page read under load can tell
  // the answer to the last query from that of an earlier one (the same words for "w" and "@/").
  function say(query, text) {
    status.textContent = text;
    status.setAttribute("data-query", query);
  }

  function show(text) {
    var query = text.trim();
    if (!query) {
      results.hidden = true;
      browse.hidden = false;
      say(query, "");
      return;
    }
    var wanted = plan(query);
    if (!wanted) {
      list.textContent = "";
      results.hidden = true;
      browse.hidden = false;
      say(query, "Type at least two letters or digits: search matches the start of words in names, keywords, maintainers and descriptions.");
      return;
    }
    Promise.all(wanted.keys.map(loadShard)).then(function (lists) {
      var packages = [].concat.apply([], lists);
      if (input.value.trim() !== query) return; // a newer query is on its way
      var found = search(packages, wanted, query);
      list.textContent = "";
      var fragment = document.createDocumentFragment();
      found.slice(0, MAX_SHOWN).forEach(function (p) { fragment.appendChild(entry(p)); });
      list.appendChild(fragment);
      list.setAttribute("data-query", query); // which query the list answers (typing renders each pause's)
      say(query, found.length === 0 ? "No package matches “" + query + "” (search matches the start of words in names, keywords, maintainers and, from three letters on, descriptions)."
        : found.length + (found.length === 1 ? " package matches" : " packages match")
          + (found.length > MAX_SHOWN ? " (showing the first " + MAX_SHOWN + ")" : "") + ".");
      results.hidden = found.length === 0;
      browse.hidden = true;
    }, function (error) {
      if (input.value.trim() !== query) return;
      say(query, location.protocol === "file:" ? "Search needs the site to be served over http(s); browse the lists below instead."
        : "Search is not available right now (" + error.message + "); browse the lists below instead.");
      results.hidden = true;
      browse.hidden = false;
    });
  }

  function remember(text) {
    var url = new URL(location.href);
    if (text.trim()) url.searchParams.set("q", text.trim()); else url.searchParams.delete("q");
    history.replaceState(null, "", url.toString());
  }

  var timer = null;
  input.addEventListener("input", function () {
    clearTimeout(timer);
    timer = setTimeout(function () { show(input.value); remember(input.value); }, 80);
  });
  form.addEventListener("submit", function (event) { event.preventDefault(); show(input.value); remember(input.value); });
  if (topInput) topInput.closest("form").hidden = true; // the big box is right here

  var initial = new URLSearchParams(location.search).get("q");
  if (initial) {
    input.value = initial;
    show(initial);
  }
})();
