// Runs app.js against a minimal DOM and a fetch that answers with the
// state in argv[3] (or with argv[4] as the status), then prints what the
// page shows as JSON. Used by TestPageRenders (go test), not shipped.
"use strict";
const fs = require("fs");
const vm = require("vm");

class Elem {
  constructor(tag) { this.tag = tag; this.children = []; this.attrs = {}; this.style = {}; this.className = ""; this._text = ""; this.listeners = {}; }
  get firstChild() { return this.children[0] || null; }
  append(...cs) { for (const c of cs) this.children.push(c); }
  removeChild(c) { this.children.splice(this.children.indexOf(c), 1); }
  replaceChildren(...cs) { this.children = cs; }
  setAttribute(k, v) { if (typeof v === "number" && !Number.isFinite(v)) throw new Error("attribute " + k + " = " + v); this.attrs[k] = String(v); }
  set textContent(t) { this._text = String(t); this.children = []; }
  get textContent() { return this._text + this.children.map((c) => c.textContent).join(""); }
  addEventListener(ev, fn) { this.listeners[ev] = fn; }
  count(tag) { return (this.tag === tag ? 1 : 0) + this.children.reduce((n, c) => n + c.count(tag), 0); }
  find(pred, out = []) { if (pred(this)) out.push(this); for (const c of this.children) c.find(pred, out); return out; }
}
const ids = {};
const document = {
  getElementById: (id) => (ids[id] = ids[id] || new Elem("#" + id)),
  createElement: (t) => new Elem(t),
  createElementNS: (_, t) => new Elem(t),
};
const storage = {};
const state = process.argv[2] ? fs.readFileSync(process.argv[2], "utf8") : "{}";
const status = Number(process.argv[3] || 200);
let polls = 0;
const sandbox = {
  document, console, Math, Number, String, Object, Date, JSON, Infinity, Promise, RegExp, Array,
  localStorage: { getItem: (k) => storage[k] || null, setItem: (k, v) => { storage[k] = v; } },
  fetch: async (url, opts) => { polls++; return { status, ok: status === 200, json: async () => JSON.parse(state) }; },
  setTimeout: () => {},
};
vm.createContext(sandbox);
vm.runInContext(fs.readFileSync(__dirname + "/../app.js", "utf8"), sandbox);
setImmediate(() => {
  const txt = (id) => document.getElementById(id).textContent;
  const cards = document.getElementById("cards").children.map((c) => c.textContent);
  const rows = document.getElementById("versions").children;
  // Each chart: its points, lines, bars, the points in red (rolled back),
  // the numbers on its axes and its legend.
  const charts = {};
  for (const id of ["rewardchart", "steprewardchart", "losschart", "klchart", "entropychart", "gradchart", "lrchart"]) {
    const svg = document.getElementById(id), cls = (c) => svg.find((e) => e.attrs.class === c);
    charts[id] = {
      dots: cls("pt").length, red: cls("pt").filter((e) => e.attrs.fill === "#d64545").length, lines: cls("line").length, bars: cls("bar").length,
      yticks: cls("ytick").map((e) => e.textContent), xticks: cls("xtick").map((e) => e.textContent), legend: cls("legend").map((e) => e.textContent),
      text: svg.textContent,
    };
  }
  console.log(JSON.stringify({
    polls, model: txt("model"), version: txt("version"), training: txt("training"), errors: txt("errors"),
    keyShown: document.getElementById("key").style.display === "block",
    cards,
    versionRows: rows.length,
    rollbackRows: rows.filter((r) => r.className === "rollback").length,
    firstRow: rows.length ? rows[0].textContent : "",
    rows: rows.map((r) => r.textContent),
    charts,
    dropped: document.getElementById("dropped").children.map((r) => r.children.map((c) => c.textContent)),
  }));
});
