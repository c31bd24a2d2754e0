// tracker_saver UI: the records table, the score chart and a record's details, over /api.
// Every piece of data reaches the page through textContent or an SVG attribute, never as HTML.
"use strict";

const FILTERS = ["project", "run", "stream", "state", "where"];
const POLL_MS = 2000;
const SVG = "http://www.w3.org/2000/svg";
// Record fields the details panel lists above the metadata (as `tracker-saver models show` does).
const RECORD_FIELDS = ["id", "state", "filename", "slot", "uri", "key", "sha256", "size", "created_at", "error"];
// What the save cost (tracker_saver.timings): the panel shows them as fields, not again in the metadata table.
const TIMING_KEYS = ["save_blocked_s", "save_durable_s", "save_bytes", "save_mb_s", "save_background"];
const COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2"];

const view = { order: "-created_at", offset: 0, limit: 50, record: null };
for (const key of FILTERS) view[key] = "";
let shown = { rows: "", chart: "" };
let current = null; // the record shown in the details panel

const $ = (id) => document.getElementById(id);

function el(tag, text, cls) {
  const node = document.createElement(tag);
  if (text !== undefined && text !== null) node.textContent = String(text);
  if (cls) node.className = cls;
  return node;
}

function svg(tag, attrs) {
  const node = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, String(v));
  return node;
}

function fmtSize(bytes) {
  if (bytes === null || bytes === undefined) return "";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let n = bytes;
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i += 1; }
  return (i === 0 ? String(n) : n.toFixed(1)) + " " + units[i];
}

// Durations read as in `tracker-saver models show` and `runs stats`: ms below one second, else seconds.
function fmtSeconds(seconds) {
  if (seconds === null || seconds === undefined) return "";
  return seconds < 1 ? (seconds * 1000).toFixed(1) + " ms" : seconds.toFixed(2) + " s";
}

// Dates read as in the CLI's tables and `models show`: YYYY-MM-DD HH:MM:SS in local time (docs/ui.md).
function fmtTime(seconds) {
  if (!seconds) return "";
  const d = new Date(seconds * 1000);
  const pad = (x) => String(x).padStart(2, "0");
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
}

function timeCell(seconds) {
  // Date and time each stay whole: a narrow column wraps between them, never inside the date.
  const td = el("td", null, "created");
  const [day, time] = fmtTime(seconds).split(" ");
  td.append(el("span", day), " ", el("span", time));
  return td;
}

function fmtScore(r) {
  if (r.score === null || r.score === undefined) return "";
  return (r.score_name ? r.score_name + " " : "") + Number(r.score).toFixed(4);
}

class ApiError extends Error {}

async function api(path, options) {
  const response = await fetch(path, Object.assign({ headers: { "Content-Type": "application/json" } }, options || {}));
  if (!response.ok) {
    let detail = `${response.status} ${response.statusText}`;
    try { detail = (await response.json()).detail || detail; } catch (e) { /* not JSON */ }
    throw new ApiError(String(detail));
  }
  return response.status === 204 ? null : response.json();
}

function showError(node, error) {
  node.textContent = error ? (error instanceof ApiError ? error.message : `request failed: ${error.message}`) : "";
  node.hidden = !error;
}

// ---- URL <-> view -------------------------------------------------------

function readUrl() {
  const q = new URLSearchParams(location.search);
  for (const key of FILTERS) view[key] = q.get(key) || "";
  view.order = q.get("order") || "-created_at";
  view.offset = Math.max(0, parseInt(q.get("offset") || "0", 10) || 0);
  view.limit = Math.min(500, Math.max(1, parseInt(q.get("limit") || "50", 10) || 50));
  view.record = q.get("record");
}

function writeUrl(push) {
  const q = new URLSearchParams();
  for (const key of FILTERS) if (view[key]) q.set(key, view[key]);
  if (view.order !== "-created_at") q.set("order", view.order);
  if (view.offset) q.set("offset", String(view.offset));
  if (view.limit !== 50) q.set("limit", String(view.limit));
  if (view.record) q.set("record", view.record);
  const url = location.pathname + (q.toString() ? "?" + q.toString() : "");
  if (url !== location.pathname + location.search) history[push ? "pushState" : "replaceState"](null, "", url);
}

function fillForm() {
  for (const key of FILTERS) $("f-" + key).value = view[key];
  $("limit").value = String(view.limit);
}

function filterQuery() {
  const q = new URLSearchParams();
  for (const key of FILTERS) if (view[key]) q.set(key, view[key]);
  return q;
}

// ---- table --------------------------------------------------------------

function renderRows(page) {
  const body = $("rows");
  body.replaceChildren();
  for (const r of page.items) {
    const tr = el("tr");
    tr.dataset.id = r.id;
    tr.tabIndex = 0;
    const name = el("td", null, "name");
    name.append(el("span", r.name, "record-name"));
    for (const alias of r.aliases) name.append(el("span", alias, "chip alias"));
    tr.append(name, el("td", r.project, "text"), el("td", r.run, "text"), el("td", r.stream, "text"),
      el("td", r.step, "num"), el("td", fmtScore(r), "num"), el("td", r.state, "state state-" + r.state),
      el("td", fmtSize(r.size), "num"), timeCell(r.created_at));
    tr.addEventListener("click", () => openRecord(r.id, true));
    tr.addEventListener("keydown", (e) => { if (e.key === "Enter") openRecord(r.id, true); });
    if (r.id === view.record) tr.classList.add("selected");
    body.append(tr);
  }
  const last = page.offset + page.items.length;
  $("range").textContent = page.total ? `${page.offset + 1}–${last} of ${page.total}` : "no records match";
  $("prev").disabled = page.offset === 0;
  $("next").disabled = last >= page.total;
  for (const button of document.querySelectorAll("#models th button")) {
    const key = button.dataset.key;
    const th = button.parentElement;
    th.removeAttribute("aria-sort");
    button.classList.remove("asc", "desc");
    if (view.order === key || view.order === "-" + key) {
      const desc = view.order.startsWith("-");
      th.setAttribute("aria-sort", desc ? "descending" : "ascending");
      button.classList.add(desc ? "desc" : "asc");
    }
  }
}

// ---- chart --------------------------------------------------------------

function renderChart(data) {
  const chart = $("chart");
  const legend = $("legend");
  chart.replaceChildren();
  legend.replaceChildren();
  const W = 720, H = 260, L = 52, R = 12, T = 12, B = 34;
  const points = data.series.flatMap((s) => s.points);
  if (!points.length) {
    const t = svg("text", { x: W / 2, y: H / 2, "text-anchor": "middle", class: "empty" });
    t.textContent = "no checkpoint with a score matches";
    chart.append(t);
    return;
  }
  let [x0, x1] = [Math.min(...points.map((p) => p.step)), Math.max(...points.map((p) => p.step))];
  let [y0, y1] = [Math.min(...points.map((p) => p.score)), Math.max(...points.map((p) => p.score))];
  if (x0 === x1) { x0 -= 1; x1 += 1; }
  x0 -= (x1 - x0) * 0.03; x1 += (x1 - x0) * 0.03; // room for the first and last marker
  if (y0 === y1) { y0 -= 0.5; y1 += 0.5; }
  const pad = (y1 - y0) * 0.08;
  y0 -= pad; y1 += pad;
  const sx = (x) => L + ((x - x0) / (x1 - x0)) * (W - L - R);
  const sy = (y) => H - B - ((y - y0) / (y1 - y0)) * (H - T - B);
  chart.append(svg("line", { x1: L, y1: H - B, x2: W - R, y2: H - B, class: "axis" }));
  chart.append(svg("line", { x1: L, y1: T, x2: L, y2: H - B, class: "axis" }));
  // Steps are integers: tick whole steps, at most about eight of them.
  const every = Math.max(1, Math.ceil((x1 - x0) / 8));
  for (let xv = Math.ceil(x0 / every) * every; xv <= x1; xv += every) {
    const xt = svg("text", { x: sx(xv), y: H - B + 16, "text-anchor": "middle", class: "tick" });
    xt.textContent = String(xv);
    chart.append(xt, svg("line", { x1: sx(xv), y1: H - B, x2: sx(xv), y2: H - B + 4, class: "axis" }));
  }
  for (let i = 0; i <= 4; i++) {
    const yv = y0 + ((y1 - y0) * i) / 4;
    const yt = svg("text", { x: L - 6, y: sy(yv) + 4, "text-anchor": "end", class: "tick" });
    yt.textContent = yv.toFixed(3);
    chart.append(yt, svg("line", { x1: L, y1: sy(yv), x2: W - R, y2: sy(yv), class: "grid" }));
  }
  const xl = svg("text", { x: (L + W - R) / 2, y: H - 4, "text-anchor": "middle", class: "label" });
  xl.textContent = "step";
  chart.append(xl);
  data.series.forEach((s, i) => {
    const color = COLORS[i % COLORS.length];
    const label = `${s.project}/${s.run}/${s.stream}`;
    chart.append(svg("polyline", {
      points: s.points.map((p) => `${sx(p.step)},${sy(p.score)}`).join(" "), class: "trace", stroke: color,
    }));
    for (const p of s.points) {
      const live = p.state !== "evicted";
      const dot = svg("circle", {
        cx: sx(p.step), cy: sy(p.score), r: 5, class: "point " + (live ? "live" : "evicted"),
        stroke: color, fill: live ? color : "#fff", "data-stream": s.stream, "data-id": p.id,
      });
      const tip = svg("title");
      tip.textContent = `${p.name}\nstep ${p.step}, ${s.score_name || "score"} ${p.score}, ${p.state}` +
        (p.durable_s === null ? "" : `\nsave: blocked ${fmtSeconds(p.blocked_s)}, durable ${fmtSeconds(p.durable_s)}`);
      dot.append(tip);
      dot.addEventListener("click", () => openRecord(p.id, true));
      chart.append(dot);
    }
    const item = el("span", null, "legend-item");
    const swatch = svg("svg", { width: 14, height: 14, class: "swatch" });
    swatch.append(svg("circle", { cx: 7, cy: 7, r: 5, fill: color, stroke: color }));
    item.append(swatch, el("span", label + (s.score_name ? ` (${s.score_name})` : "")));
    legend.append(item);
  });
  const kinds = el("span", null, "legend-item legend-states");
  for (const [cls, text] of [["live", "live / revived"], ["evicted", "evicted"]]) {
    const swatch = svg("svg", { width: 14, height: 14, class: "swatch" });
    swatch.append(svg("circle", { cx: 7, cy: 7, r: 5, fill: cls === "live" ? "#444" : "#fff", stroke: "#444" }));
    kinds.append(swatch, el("span", text));
  }
  legend.append(kinds);
}

// ---- loading ------------------------------------------------------------

async function refresh(force) {
  const q = filterQuery();
  const page = new URLSearchParams(q);
  page.set("order_by", view.order);
  page.set("offset", String(view.offset));
  page.set("limit", String(view.limit));
  try {
    const [rows, chart] = await Promise.all([api("/api/models?" + page), api("/api/chart?" + q)]);
    const rowsText = JSON.stringify(rows);
    const chartText = JSON.stringify(chart);
    if (force || rowsText !== shown.rows) renderRows(rows);
    if (force || chartText !== shown.chart) renderChart(chart);
    shown = { rows: rowsText, chart: chartText };
    showError($("error"), null);
    $("live-status").textContent = "updated " + fmtTime(Date.now() / 1000);
  } catch (error) {
    showError($("error"), error);
  }
}

function field(dl, term, value) {
  if (value === null || value === undefined || value === "") return;
  dl.append(el("dt", term), el("dd", value));
}

function renderDetails(detail) {
  const r = detail.record;
  current = r;
  $("details").hidden = false;
  $("d-title").textContent = r.name;
  $("d-name").value = r.name;
  const dl = $("d-fields");
  dl.replaceChildren();
  field(dl, "id", r.id);
  field(dl, "state", r.state);
  field(dl, "project / run / stream", `${r.project} / ${r.run} / ${r.stream}`);
  field(dl, "Ignite filename", r.filename);
  field(dl, "slot", r.slot);
  field(dl, "storage uri", r.uri);
  field(dl, "key", r.key);
  field(dl, "sha256", r.sha256);
  field(dl, "size", r.size === null ? null : `${fmtSize(r.size)} (${r.size} bytes)`);
  field(dl, "created", fmtTime(r.created_at));
  const t = r.timings;
  if (t) {
    field(dl, "save blocked", fmtSeconds(t.blocked_s));
    field(dl, "save durable", fmtSeconds(t.durable_s));
    field(dl, "save throughput", `${t.mb_s.toFixed(1)} MB/s`);
    field(dl, "saved by", t.background ? "the background worker (async_upload)" : "the training thread");
  }
  field(dl, "error", r.error);
  const tags = $("d-tags");
  tags.replaceChildren();
  for (const tag of r.tags) tags.append(chip(tag, () => removeTag(tag)));
  const aliases = $("d-aliases");
  aliases.replaceChildren();
  for (const alias of r.aliases) {
    const derived = alias === "latest" || alias === "best";
    aliases.append(chip(alias, derived ? null : () => removeAlias(alias)));
  }
  const meta = $("d-metadata").tBodies[0];
  meta.replaceChildren();
  for (const key of Object.keys(r.metadata).sort()) {
    if (RECORD_FIELDS.includes(key) || TIMING_KEYS.includes(key)) continue; // shown once, above
    const tr = el("tr");
    const value = r.metadata[key];
    tr.append(el("th", key), el("td", value === null ? "—" : `${value}`), el("td", r.metadata_types[key] || "", "muted"));
    meta.append(tr);
  }
  const hist = $("d-history").tBodies[0];
  hist.replaceChildren();
  for (const h of detail.history) {
    const tr = el("tr");
    if (h.id === r.id) tr.classList.add("selected");
    tr.append(el("td", h.name), el("td", h.state, "state state-" + h.state), el("td", h.step), el("td", fmtScore(h)),
      el("td", fmtTime(h.created_at)));
    tr.addEventListener("click", () => openRecord(h.id, true));
    hist.append(tr);
  }
  $("d-pin").hidden = !["live", "revived"].includes(r.state);
  $("d-unpin").hidden = r.state !== "pinned";
  $("d-download").disabled = !["live", "revived", "pinned"].includes(r.state);
  for (const tr of $("rows").children) tr.classList.toggle("selected", tr.dataset.id === r.id);
}

function chip(text, onRemove) {
  const li = el("li", null, "chip");
  li.append(el("span", text));
  if (onRemove) {
    const x = el("button", "×", "remove");
    x.type = "button";
    x.setAttribute("aria-label", "remove " + text);
    x.addEventListener("click", onRemove);
    li.append(x);
  }
  return li;
}

async function openRecord(id, push) {
  view.record = id;
  writeUrl(push);
  showError($("d-message"), null);
  try {
    renderDetails(await api(`/api/models/${encodeURIComponent(id)}`));
    // In a narrow window the panel sits above the list (app.css): bring it into view on a click.
    if (push && getComputedStyle($("details")).position !== "sticky") $("details").scrollIntoView({ block: "start" });
  } catch (error) {
    $("details").hidden = false;
    showError($("d-message"), error);
  }
}

async function act(promise) {
  showError($("d-message"), null);
  try {
    const result = await promise;
    await refresh(false);
    return result;
  } catch (error) {
    showError($("d-message"), error);
    return null;
  }
}

function recordPath(suffix) {
  return `/api/models/${encodeURIComponent(current.id)}${suffix || ""}`;
}

async function rename(event) {
  event.preventDefault();
  if (!current) return;
  const name = $("d-name").value;
  const record = await act(api(recordPath(), { method: "PATCH", body: JSON.stringify({ name }) }));
  if (record) await openRecord(record.id, false);
}

async function addTag(event) {
  event.preventDefault();
  const tag = $("d-tag").value.trim();
  if (!current || !tag) return;
  if (await act(api(recordPath("/tags"), { method: "POST", body: JSON.stringify({ tags: [tag] }) }))) {
    $("d-tag").value = "";
    await openRecord(current.id, false);
  }
}

async function removeTag(tag) {
  if (await act(api(recordPath("/tags?" + new URLSearchParams({ tag })), { method: "DELETE" }))) {
    await openRecord(current.id, false);
  }
}

async function setAlias(event) {
  event.preventDefault();
  const alias = $("d-alias").value.trim();
  if (!current || !alias) return;
  // On a slot record the alias goes on a pinned copy (it never dangles): show the record it names.
  const named = await act(api(recordPath("/aliases"), { method: "POST", body: JSON.stringify({ alias }) }));
  if (named) {
    $("d-alias").value = "";
    await openRecord(named.id, named.id !== current.id);
  }
}

async function removeAlias(alias) {
  if (await act(api(recordPath("/aliases/" + encodeURIComponent(alias)), { method: "DELETE" }))) {
    await openRecord(current.id, false);
  }
}

async function pin() {
  const pinned = await act(api(recordPath("/pin"), { method: "POST" }));
  if (pinned) await openRecord(pinned.id, true);
}

async function unpin() {
  const id = current.id;
  showError($("d-message"), null);
  try {
    await api(recordPath("/pin"), { method: "DELETE" });
    closeDetails();
    await refresh(false);
  } catch (error) {
    showError($("d-message"), error);
  }
  return id;
}

async function download() {
  // fetch, not a plain link: a failed verification must show its message, never save its body as the file.
  showError($("d-message"), null);
  const button = $("d-download");
  button.disabled = true;
  try {
    const response = await fetch(recordPath("/download"));
    if (!response.ok) {
      let detail = `${response.status} ${response.statusText}`;
      try { detail = (await response.json()).detail || detail; } catch (e) { /* not JSON */ }
      throw new ApiError(String(detail));
    }
    const blob = await response.blob();
    const link = el("a");
    link.href = URL.createObjectURL(blob);
    link.download = current.name;
    document.body.append(link);
    link.click();
    link.remove();
    setTimeout(() => URL.revokeObjectURL(link.href), 10000);
  } catch (error) {
    showError($("d-message"), error);
  } finally {
    button.disabled = false;
  }
}

function closeDetails() {
  current = null;
  view.record = null;
  $("details").hidden = true;
  writeUrl(true);
  for (const tr of $("rows").children) tr.classList.remove("selected");
}

// ---- wiring -------------------------------------------------------------

function load() {
  readUrl();
  fillForm();
  refresh(true);
  if (view.record) openRecord(view.record, false);
  else { current = null; $("details").hidden = true; }
}

document.addEventListener("DOMContentLoaded", () => {
  $("filters").addEventListener("submit", (event) => {
    event.preventDefault();
    for (const key of FILTERS) view[key] = $("f-" + key).value.trim();
    view.offset = 0;
    writeUrl(true);
    refresh(true);
  });
  $("clear").addEventListener("click", () => {
    for (const key of FILTERS) view[key] = "";
    view.offset = 0;
    fillForm();
    writeUrl(true);
    refresh(true);
  });
  for (const button of document.querySelectorAll("#models th button")) {
    button.addEventListener("click", () => {
      const key = button.dataset.key;
      view.order = view.order === key ? "-" + key : key;
      view.offset = 0;
      writeUrl(true);
      refresh(true);
    });
  }
  $("prev").addEventListener("click", () => { view.offset = Math.max(0, view.offset - view.limit); writeUrl(true); refresh(true); });
  $("next").addEventListener("click", () => { view.offset += view.limit; writeUrl(true); refresh(true); });
  $("limit").addEventListener("change", () => { view.limit = parseInt($("limit").value, 10); view.offset = 0; writeUrl(true); refresh(true); });
  $("rename-form").addEventListener("submit", rename);
  $("tag-form").addEventListener("submit", addTag);
  $("alias-form").addEventListener("submit", setAlias);
  $("d-pin").addEventListener("click", pin);
  $("d-unpin").addEventListener("click", unpin);
  $("d-download").addEventListener("click", download);
  $("d-close").addEventListener("click", closeDetails);
  window.addEventListener("popstate", load);
  load();
  // Training adds checkpoints while the page is open: poll, and redraw only what changed.
  setInterval(() => { if (!document.hidden) refresh(false); }, POLL_MS);
});
