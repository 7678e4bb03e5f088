// The Code tab of a package or version page: the version's files, read in the browser from its
// tarball, with no server and no page per file list. The tarball is fetched from this tree (the
// same request a download makes, so a private package's reader sends what they sent for the
// page), inflated with DecompressionStream and its tar headers walked as they stream by. Only the
// headers and the one file shown are ever held, so memory stays bounded whatever the tarball
// holds; caps on its compressed and unpacked size and on its entries bound the work.
// Everything read from the tarball goes into the page as text (textContent): a package's names
// and files are never HTML, never a URL, never run.
(function () {
  "use strict";
  var panel = document.getElementById("code");
  var tablist = document.getElementById("tabs");
  if (!panel || !tablist) return;

  var limits = {
    tarball: Number(panel.getAttribute("data-max-tarball-bytes")),
    unpacked: Number(panel.getAttribute("data-max-unpacked-bytes")),
    entries: Number(panel.getAttribute("data-max-entries")),
    shown: Number(panel.getAttribute("data-max-shown-bytes"))
  };
  var BLOCK = 512;
  var MAX_HEADER_DATA = 64 * 1024; // a long name or pax record past this is refused (as archive.py does)
  var OPEN_FOLDERS_UP_TO = 60; // files in all: a bigger tree starts with its folders closed
  var names = new TextDecoder("utf-8");
  var TRUNCATED = "The tarball ends in the middle of an entry: it is truncated or damaged.";

  function element(tag, className, text) {
    var made = document.createElement(tag);
    if (className) made.className = className;
    if (text !== undefined) made.textContent = text;
    return made;
  }

  // As the pages say sizes (registry_gen.site.format_size): 1 kB = 1000 bytes.
  function size(bytes) {
    var value = bytes, units = ["B", "kB", "MB", "GB", "TB"], unit = 0;
    while (value >= 1000 && unit < units.length - 1) { value /= 1000; unit++; }
    return unit === 0 ? value + " B" : value.toFixed(1) + " " + units[unit];
  }

  // ------------------------------------------------------------ reading the tarball

  // Why the Code tab stops: `what` is said to the reader; `partial` keeps what was listed so far.
  function Refusal(what, partial) {
    this.message = what;
    this.partial = Boolean(partial);
  }

  // Exact byte counts from a stream of chunks, holding at most one chunk plus what was asked for.
  function byteReader(stream, cap) {
    var source = stream.getReader();
    var chunk = new Uint8Array(0), at = 0, ended = false, total = 0;
    async function fill() {
      while (at >= chunk.length && !ended) {
        var next = await source.read();
        if (next.done) { ended = true; return; }
        chunk = next.value;
        at = 0;
        total += chunk.length;
        if (total > cap) throw new Refusal("It unpacks to more than " + size(cap) + ", more than the Code tab reads; download the tarball to read the rest.", true);
      }
    }
    // `count` bytes, copied out when `keep`, else skipped; null at a clean end of the stream.
    async function take(count, keep) {
      var out = keep ? new Uint8Array(count) : null, got = 0;
      while (got < count) {
        await fill();
        if (at >= chunk.length) {
          if (got === 0 && keep) return null;
          throw new Refusal(TRUNCATED, true);
        }
        var n = Math.min(count - got, chunk.length - at);
        if (out) out.set(chunk.subarray(at, at + n), got);
        got += n;
        at += n;
      }
      return out;
    }
    return {
      read: function (count) { return take(count, true); },
      skip: function (count) { return take(count, false); },
      close: function () { return source.cancel().catch(function () {}); }
    };
  }

  function text(bytes) {
    var end = bytes.indexOf(0);
    return names.decode(end < 0 ? bytes : bytes.subarray(0, end));
  }

  // A tar number: octal digits, or base-256 (a first byte of 0x80) for values past 8 GiB;
  // NaN for anything else, Infinity past what a JavaScript number holds exactly.
  function number(field) {
    if (field[0] === 0x80) {
      var value = 0;
      for (var i = 1; i < field.length; i++) value = value * 256 + field[i];
      return value > Number.MAX_SAFE_INTEGER ? Infinity : value;
    }
    var digits = text(field).trim();
    if (!digits) return 0;
    return /^[0-7]+$/.test(digits) ? parseInt(digits, 8) : NaN;
  }

  function isZeros(block) {
    for (var i = 0; i < block.length; i++) if (block[i] !== 0) return false;
    return true;
  }

  function checksumMatches(block) {
    var sum = 0;
    for (var i = 0; i < BLOCK; i++) sum += i >= 148 && i < 156 ? 32 : block[i];
    return number(block.subarray(148, 156)) === sum;
  }

  // pax extended header records: "<length> <key>=<value>\n", one after the other.
  function paxRecords(data) {
    var found = {}, at = 0;
    while (at < data.length) {
      var space = data.indexOf(32, at);
      var length = space < 0 ? NaN : Number(names.decode(data.subarray(at, space)));
      if (!(length > 0) || at + length > data.length) throw new Refusal("A pax header of the tarball is damaged.", true);
      var record = names.decode(data.subarray(space + 1, at + length - 1));
      var equals = record.indexOf("=");
      if (equals > 0) found[record.slice(0, equals)] = record.slice(equals + 1);
      at += length;
    }
    return found;
  }

  // The kinds of entry shown; everything else is listed as "other".
  var KINDS = { "0": "file", "\0": "file", "7": "file", "1": "hard link", "2": "symbolic link", "5": "folder" };
  // Entries whose header size counts data blocks after it (tarfile's and npm's tar's reading).
  var HOLDS_DATA = { "0": true, "\0": true, "7": true, "L": true, "K": true, "x": true, "g": true };

  // One entry of the archive from its header, the GNU long name/link and pax records before it.
  function entryOf(block, pending) {
    var type = String.fromCharCode(block[156]);
    var name = text(block.subarray(0, 100));
    var magic = text(block.subarray(257, 263));
    if (magic === "ustar") { // POSIX ustar: a prefix field holds the start of long names
      var prefix = text(block.subarray(345, 500));
      if (prefix) name = prefix + "/" + name;
    }
    if (pending.longName !== null) name = pending.longName;
    if (pending.pax.path !== undefined) name = pending.pax.path;
    var link = pending.longLink !== null ? pending.longLink : text(block.subarray(157, 257));
    if (pending.pax.linkpath !== undefined) link = pending.pax.linkpath;
    var declared = pending.pax.size !== undefined ? Number(pending.pax.size) : number(block.subarray(124, 136));
    if (type === "0" && name.slice(-1) === "/") type = "5"; // an old-style folder
    return { type: type, kind: KINDS[type] || "other", name: name, link: link, size: declared };
  }

  // The path people know the entry by: below the tarball's top folder (npm strips the first part).
  function shownPath(name) {
    var trimmed = name.replace(/\/+$/, "");
    var slash = trimmed.indexOf("/");
    return slash >= 0 ? trimmed.slice(slash + 1) : trimmed;
  }

  // Walks the archive, calling visit(entry, ordinal) for each entry. visit answers how many bytes
  // of the entry's data it wants: 0 for none (the walk goes on), more to end the walk with them in
  // entry.data, -1 to end it at once.
  async function walk(bytes, visit) {
    var pending = { longName: null, longLink: null, pax: {} };
    for (var ordinal = 0; ; ordinal++) {
      var block = await bytes.read(BLOCK);
      if (block === null || isZeros(block)) return; // the end (with or without its zero blocks)
      if (!checksumMatches(block)) throw new Refusal("A tar header of the tarball is damaged (its checksum does not match).", true);
      var entry = entryOf(block, pending);
      var data = HOLDS_DATA[entry.type] ? entry.size : 0;
      if (!(data >= 0) || data > limits.unpacked) {
        throw new Refusal("An entry of the tarball (" + entry.name.slice(0, 200) + ") declares a size of " + (data >= 0 ? size(data) : "“" + entry.size + "”") + ", more than the Code tab unpacks.", true);
      }
      var padded = Math.ceil(data / BLOCK) * BLOCK;
      if (entry.type === "L" || entry.type === "K" || entry.type === "x" || entry.type === "g") {
        if (data > MAX_HEADER_DATA) throw new Refusal("An extended tar header of the tarball is larger than " + size(MAX_HEADER_DATA) + ".", true);
        var value = padded ? await bytes.read(padded) : new Uint8Array(0);
        if (value === null) throw new Refusal(TRUNCATED, true);
        value = value.subarray(0, data);
        if (entry.type === "L") pending.longName = text(value);
        if (entry.type === "K") pending.longLink = text(value);
        if (entry.type === "x") pending.pax = paxRecords(value);
        ordinal--; // "g" (global pax records) changes nothing this reader shows
        continue;
      }
      pending = { longName: null, longLink: null, pax: {} };
      entry.path = shownPath(entry.name);
      var wanted = visit(entry, ordinal);
      if (wanted < 0) return;
      if (wanted > 0 && data > 0) {
        entry.data = await bytes.read(Math.min(wanted, data));
        if (entry.data === null) throw new Refusal(TRUNCATED, true);
        return;
      }
      await bytes.skip(padded);
    }
  }

  // The tarball's bytes, inflated, as a stream; refused before anything is read when it is known
  // to be past the cap (from the page, then from Content-Length), and cut if it grows past it.
  async function inflated(url, knownBytes) {
    if (knownBytes > limits.tarball) throw tooBig(knownBytes);
    if (typeof DecompressionStream !== "function") throw new Refusal("This browser cannot unpack tarballs (it has no DecompressionStream); download the tarball to read its files.");
    var response;
    try {
      response = await fetch(url, { credentials: "same-origin" });
    } catch (error) {
      throw new Refusal("The tarball could not be fetched (" + error.message + ").");
    }
    if (!response.ok) {
      response.body && response.body.cancel().catch(function () {});
      throw new Refusal("The tarball could not be fetched (HTTP " + response.status + ").");
    }
    var announced = Number(response.headers.get("Content-Length"));
    if (announced > limits.tarball) {
      response.body.cancel().catch(function () {});
      throw tooBig(announced);
    }
    var seen = 0;
    var counted = new TransformStream({
      transform: function (chunk, controller) {
        seen += chunk.length;
        if (seen > limits.tarball) controller.error(tooBig(seen));
        else controller.enqueue(chunk);
      }
    });
    return response.body.pipeThrough(counted).pipeThrough(new DecompressionStream("gzip"));
  }

  function tooBig(bytes) {
    return new Refusal("This tarball is " + size(bytes) + ": the Code tab reads tarballs of up to " + size(limits.tarball) + ". Download the tarball to read its files.");
  }

  // A failure of the stream itself (not a Refusal) means the gzip data is cut short or corrupt.
  function refusalOf(error) {
    if (error instanceof Refusal) return error;
    return new Refusal("The tarball is truncated or damaged (" + (error && error.message || error) + ").", true);
  }

  async function listEntries(url, knownBytes) {
    var bytes = byteReader(await inflated(url, knownBytes), limits.unpacked);
    var entries = new Map(), capped = false;
    try {
      await walk(bytes, function (entry, ordinal) {
        if (entry.kind === "folder" || !entry.path) return 0;
        if (!entries.has(entry.path) && entries.size >= limits.entries) { capped = true; return -1; }
        entry.ordinal = ordinal; // the last entry of a path is the one npm extracts
        entries.delete(entry.path);
        entries.set(entry.path, entry);
        return 0;
      });
    } catch (error) {
      return { entries: entries, capped: capped, problem: refusalOf(error) };
    } finally {
      bytes.close();
    }
    return { entries: entries, capped: capped, problem: null };
  }

  // The first `limits.shown` bytes of the entry with this ordinal, read again from the tarball
  // (the HTTP cache has it): nothing but the list is kept between files.
  async function contentOf(url, knownBytes, wanted) {
    var bytes = byteReader(await inflated(url, knownBytes), limits.unpacked);
    var found = null;
    try {
      await walk(bytes, function (entry, ordinal) {
        if (ordinal < wanted.ordinal) return 0;
        if (ordinal > wanted.ordinal || entry.size === 0) return -1;
        found = entry;
        return Math.min(entry.size, limits.shown);
      });
    } catch (error) {
      throw refusalOf(error);
    } finally {
      bytes.close();
    }
    return found && found.data ? found.data : new Uint8Array(0);
  }

  // ------------------------------------------------------------ the tab

  var tabs = Array.prototype.slice.call(tablist.querySelectorAll("[role=tab]"));
  var codeTab = document.getElementById("tab-code");
  var status = document.getElementById("code-status");
  var filesBox = document.getElementById("code-files");
  var view = document.getElementById("code-view");
  var fileTitle = document.getElementById("code-file");
  var about = document.getElementById("code-about");
  var shown = document.getElementById("code-text");
  var shownText = shown.querySelector("code");
  var url = panel.getAttribute("data-tarball");
  var knownBytes = Number(panel.getAttribute("data-tarball-bytes")) || 0;
  var listing = null; // the promise of the list, once asked for
  var entries = new Map();
  var showing = 0; // which file request is the latest (an older answer is dropped)

  function panelOf(tab) { return document.getElementById(tab.getAttribute("aria-controls")); }

  function select(tab, focus) {
    tabs.forEach(function (each) {
      var on = each === tab;
      each.setAttribute("aria-selected", on ? "true" : "false");
      each.tabIndex = on ? 0 : -1;
      panelOf(each).hidden = !on;
    });
    if (focus) tab.focus();
    if (tab === codeTab) load();
  }

  function remember(hash) {
    history.replaceState(null, "", location.pathname + location.search + hash);
  }

  tabs.forEach(function (tab, index) {
    tab.addEventListener("click", function () {
      select(tab, false);
      remember(tab === codeTab ? "#code" : "");
    });
    tab.addEventListener("keydown", function (event) {
      var to = { ArrowRight: index + 1, ArrowLeft: index - 1, Home: 0, End: tabs.length - 1 }[event.key];
      if (to === undefined) return;
      event.preventDefault();
      var next = tabs[(to + tabs.length) % tabs.length];
      select(next, true);
      remember(next === codeTab ? "#code" : "");
    });
  });

  function load() {
    if (!listing) {
      status.textContent = "Reading the tarball…";
      listing = listEntries(url, knownBytes).then(showList, function (error) {
        status.textContent = refusalOf(error).message;
      });
    }
    return listing;
  }

  function showList(result) {
    entries = result.entries;
    var total = 0;
    entries.forEach(function (entry) { total += entry.kind === "file" ? entry.size : 0; });
    var said = entries.size + (entries.size === 1 ? " file" : " files") + ", " + size(total) + " unpacked" + (result.capped ? " (the first " + limits.entries + " listed)" : "") + ".";
    status.textContent = result.problem ? said + " " + result.problem.message + (result.problem.partial ? " The files before that point are listed." : "") : said;
    filesBox.textContent = "";
    if (entries.size) {
      filesBox.appendChild(tree(entries, entries.size <= OPEN_FOLDERS_UP_TO));
      filesBox.hidden = false;
    }
  }

  // Folders first, then files, each by name; folders are native <details> (keyboard-ready).
  function tree(found, open) {
    var top = { folders: new Map(), files: [] };
    found.forEach(function (entry) {
      var parts = entry.path.split("/").filter(function (part) { return part !== "" && part !== "."; });
      var folder = top;
      parts.slice(0, -1).forEach(function (part) {
        if (!folder.folders.has(part)) folder.folders.set(part, { folders: new Map(), files: [] });
        folder = folder.folders.get(part);
      });
      folder.files.push({ name: parts.length ? parts[parts.length - 1] : entry.path, entry: entry });
    });
    return branch(top, open, "code-tree");
  }

  function byName(a, b) { return a < b ? -1 : a > b ? 1 : 0; }

  function branch(folder, open, className) {
    var list = element("ul", className);
    Array.from(folder.folders.keys()).sort(byName).forEach(function (name) {
      var item = element("li", "code-folder");
      var details = element("details");
      var inner = folder.folders.get(name), label = name + "/";
      while (inner.files.length === 0 && inner.folders.size === 1) { // a chain of lone folders is one line
        var only = inner.folders.keys().next().value;
        label += only + "/";
        inner = inner.folders.get(only);
      }
      details.open = open;
      details.appendChild(element("summary", "", label));
      details.appendChild(branch(inner, open, "code-branch"));
      item.appendChild(details);
      list.appendChild(item);
    });
    folder.files.sort(function (a, b) { return byName(a.name, b.name); }).forEach(function (file) {
      var item = element("li", "code-entry");
      var button = element("button", "code-open", file.name);
      button.type = "button";
      button.title = file.entry.path;
      button.addEventListener("click", function () { openFile(file.entry.path, true); });
      file.entry.button = button;
      item.appendChild(button);
      item.appendChild(element("span", "code-size muted", file.entry.kind === "file" ? size(file.entry.size) : file.entry.kind));
      list.appendChild(item);
    });
    return list;
  }

  function describe(words) {
    shown.hidden = true;
    shownText.textContent = "";
    about.textContent = words;
    view.hidden = false;
  }

  // A file's bytes as text, or null when they are not UTF-8 text (a NUL, or invalid UTF-8).
  function asText(bytes) {
    if (bytes.subarray(0, 8192).indexOf(0) >= 0) return null;
    try {
      return new TextDecoder("utf-8", { fatal: true }).decode(bytes);
    } catch (error) {
      return null;
    }
  }

  function openFile(path, fromClick) {
    var entry = entries.get(path);
    if (!entry) {
      status.textContent = "This version has no file " + path + ".";
      return;
    }
    var request = ++showing;
    entries.forEach(function (each) { if (each.button) each.button.removeAttribute("aria-current"); });
    entry.button.setAttribute("aria-current", "true");
    var details = entry.button.closest("details");
    for (; details; details = details.parentElement.closest("details")) details.open = true;
    if (fromClick) remember("#code/" + path.split("/").map(encodeURIComponent).join("/"));
    fileTitle.textContent = path;
    if (entry.kind !== "file") return describe(entry.kind === "other" ? "Not a regular file (tar type " + JSON.stringify(entry.type) + "); nothing to show." : "A " + entry.kind + " to " + entry.link + ".");
    if (entry.size > limits.shown) return describe(size(entry.size) + ": too large to show here (the Code tab shows files up to " + size(limits.shown) + "); download the tarball to read it.");
    describe("Reading " + size(entry.size) + "…");
    contentOf(url, knownBytes, entry).then(function (bytes) {
      if (request !== showing) return;
      var content = asText(bytes);
      if (content === null) return describe(size(entry.size) + ", binary (not UTF-8 text): not shown.");
      about.textContent = size(entry.size) + ", " + lineCount(content) + ".";
      shownText.textContent = content;
      shown.hidden = false;
    }, function (error) {
      if (request === showing) describe(refusalOf(error).message);
    });
  }

  function lineCount(content) {
    var lines = content === "" ? 0 : content.split("\n").length - (content.slice(-1) === "\n" ? 1 : 0);
    return lines + (lines === 1 ? " line" : " lines");
  }

  // #code opens the tab; #code/<path> also opens that file once the list is in.
  function follow() {
    var hash = location.hash;
    if (hash !== "#code" && hash.indexOf("#code/") !== 0) return;
    select(codeTab, false);
    var path = "";
    try { path = decodeURIComponent(hash.slice(6)); } catch (error) { path = hash.slice(6); }
    load().then(function () { if (path) openFile(path, false); });
  }

  tablist.hidden = false;
  window.addEventListener("hashchange", follow);
  follow();
})();
