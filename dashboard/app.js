// The clawrl dashboard: polls /dashboard/state and draws it. Every value
// goes into the page through textContent or SVG attributes, never HTML.
"use strict";
(function () {
  const SVGNS = "http://www.w3.org/2000/svg";
  const $ = (id) => document.getElementById(id);
  let key = localStorage.getItem("clawrl-key") || "";

  function fmt(n, digits) {
    if (n === undefined || n === null || Number.isNaN(n)) return "–";
    if (Math.abs(n) >= 1e6) return (n / 1e6).toFixed(1) + "M";
    if (Math.abs(n) >= 1e4) return (n / 1e3).toFixed(1) + "k";
    if (n !== 0 && Math.abs(n) < 1e-3) return n.toExponential(1); // a KL of 4e-7 is not 0
    return digits === undefined ? String(Math.round(n * 1000) / 1000) : n.toFixed(digits);
  }
  function duration(s) {
    s = Math.floor(s);
    const d = Math.floor(s / 86400), h = Math.floor(s / 3600) % 24, m = Math.floor(s / 60) % 60;
    return d ? d + "d " + h + "h" : h ? h + "h " + m + "m" : m + "m " + (s % 60) + "s";
  }
  // apiRequests counts the requests to /v1/ endpoints (not the dashboard's own polls).
  function apiRequests(m) {
    let t = 0;
    for (const k in m) if (k.startsWith("clawrl_http_requests_total{") && k.includes('endpoint="/v1/')) t += m[k];
    return t;
  }
  function sum(obj) { let t = 0; for (const k in obj || {}) t += obj[k]; return t; }
  function el(tag, text, cls) { const e = document.createElement(tag); if (text !== undefined) e.textContent = text; if (cls) e.className = cls; return e; }

  function card(k, v, s) {
    const c = el("div", undefined, "card");
    c.append(el("div", k, "k"), el("div", v, "v"));
    if (s) c.append(el("div", s, "s"));
    return c;
  }

  function svgEl(tag, attrs, text) {
    const e = document.createElementNS(SVGNS, tag);
    for (const a in attrs) e.setAttribute(a, attrs[a]);
    if (text !== undefined) e.textContent = text;
    return e;
  }

  const BLUE = "#2f6fec", ORANGE = "#e8912d", GOOD = "#1f9d55", BAD = "#d64545", MUTED = "#6b7385", GRID = "#e3e6ec";

  // ticks returns about n round values spanning [lo, hi] and their step.
  function ticks(lo, hi, n) {
    const raw = (hi - lo) / n, mag = Math.pow(10, Math.floor(Math.log10(raw)));
    const step = [1, 2, 5, 10].map((f) => f * mag).find((s) => s >= raw) || 10 * mag;
    const out = [];
    for (let v = Math.ceil(lo / step - 1e-9) * step; v <= hi + step * 1e-9; v += step) out.push(Math.abs(v) < step * 1e-9 ? 0 : v);
    return { values: out, step: step };
  }
  // tick writes an axis number to the precision its step needs.
  function tick(v, step) {
    if (v === 0) return "0";
    if (Math.abs(v) >= 1e4) return fmt(v);
    if (step < 1e-3) return v.toExponential(Math.max(0, Math.floor(Math.log10(Math.abs(v))) - Math.floor(Math.log10(step))));
    return v.toFixed(Math.max(0, -Math.floor(Math.log10(step) + 1e-9)));
  }
  function clock(t) {
    const d = new Date(t), two = (n) => String(n).padStart(2, "0");
    return two(d.getHours()) + ":" + two(d.getMinutes()) + ":" + two(d.getSeconds());
  }

  // chart draws layers into svg, each {kind: "line", "dots" or "bars",
  // label, color, points: [{x, y, color?}]}, x being a slot 0 … n-1. It
  // draws a y axis with round numbers (from ymin to ymax when given), an x
  // axis whose ticks xlabel(slot) names (lines of text: a step number, a
  // time), and a legend of the labelled layers and of extra entries
  // [{label, color}].
  function chart(svg, layers, o) {
    o = o || {};
    while (svg.firstChild) svg.removeChild(svg.firstChild);
    const W = 400, H = 200, L = 42, R = 10, T = 18, B = 30, pw = W - L - R, ph = H - T - B;
    let n = o.slots || 0;
    for (const l of layers) for (const p of l.points) n = Math.max(n, p.x + 1);
    if (n === 0 || layers.every((l) => l.points.length === 0)) {
      svg.append(svgEl("text", { x: W / 2, y: H / 2, "text-anchor": "middle", fill: MUTED, "font-size": 12 }, "nothing yet"));
      return;
    }
    let lo = o.ymin, hi = o.ymax;
    if (lo === undefined || hi === undefined) {
      let a = Infinity, b = -Infinity;
      for (const l of layers) for (const p of l.points) { a = Math.min(a, p.y); b = Math.max(b, p.y); }
      if (b - a <= Math.max(Math.abs(a), Math.abs(b)) * 1e-9) { a -= Math.abs(a) * 0.5 || 1; b += Math.abs(b) * 0.5 || 1; } // flat: give it room
      const t = ticks(a, b, 4);
      if (lo === undefined) lo = Math.floor(a / t.step + 1e-9) * t.step;
      if (hi === undefined) hi = Math.ceil(b / t.step - 1e-9) * t.step;
    }
    const X = (i) => L + (n === 1 ? pw / 2 : (i * pw) / (n - 1));
    const Y = (y) => T + ph - ((y - lo) * ph) / (hi - lo);
    const yt = ticks(lo, hi, 4);
    for (const v of yt.values) {
      svg.append(svgEl("line", { x1: L, x2: W - R, y1: Y(v), y2: Y(v), stroke: v === 0 ? "#c9ced8" : GRID }));
      svg.append(svgEl("text", { class: "ytick", x: L - 4, y: Y(v) + 3, "text-anchor": "end", fill: MUTED, "font-size": 9 }, tick(v, yt.step)));
    }
    svg.append(svgEl("line", { x1: L, x2: L, y1: T, y2: T + ph, stroke: "#c9ced8" }));
    const nx = Math.min(n, 5);
    for (let k = 0; k < nx; k++) {
      const i = nx === 1 ? 0 : Math.round((k * (n - 1)) / (nx - 1));
      svg.append(svgEl("line", { x1: X(i), x2: X(i), y1: T + ph, y2: T + ph + 3, stroke: "#c9ced8" }));
      const lines = o.xlabel ? o.xlabel(i) : [String(i + 1)];
      const anchor = nx > 1 && k === 0 ? "start" : nx > 1 && k === nx - 1 ? "end" : "middle";
      lines.forEach((s, j) => svg.append(svgEl("text", { class: "xtick", x: X(i), y: T + ph + 12 + 10 * j, "text-anchor": anchor, fill: MUTED, "font-size": 9 }, s)));
    }
    for (const l of layers) {
      if (l.kind === "line" && l.points.length > 0) {
        const d = l.points.map((p, i) => (i ? "L" : "M") + X(p.x).toFixed(1) + " " + Y(p.y).toFixed(1)).join(" ");
        svg.append(svgEl("path", { class: "line", d: d, fill: "none", stroke: l.color, "stroke-width": 1.5 }));
      } else if (l.kind === "dots") {
        for (const p of l.points) svg.append(svgEl("circle", { class: "pt", cx: X(p.x), cy: Y(p.y), r: 2.5, fill: p.color || l.color, "fill-opacity": 0.7 }));
      } else if (l.kind === "bars") {
        const w = Math.max(1, pw / n - 2);
        for (const p of l.points) {
          const y0 = Y(Math.min(Math.max(lo, 0), hi)), y1 = Y(p.y);
          svg.append(svgEl("rect", { class: "bar", x: X(p.x) - w / 2, y: Math.min(y0, y1), width: w, height: Math.max(1, Math.abs(y1 - y0)), fill: p.y >= 0 ? GOOD : BAD }));
        }
      }
    }
    let lx = L;
    for (const e of layers.filter((l) => l.label).concat(o.legend || [])) {
      svg.append(svgEl("rect", { class: "key", x: lx, y: 5, width: 10, height: 6, fill: e.color }));
      const t = svgEl("text", { class: "legend", x: lx + 13, y: 11, fill: "#1d2330", "font-size": 9 }, e.label);
      svg.append(t);
      lx += 22 + 5 * e.label.length;
    }
  }

  // stepChart charts stats keys of the steps, one line each, a dot per
  // step, the steps a rollback undid (or a crash lost) in red.
  function stepChart(id, steps, series, o) {
    const marked = steps.some((p) => p.status !== "applied");
    const layers = [];
    for (const s of series) {
      const pts = steps.map((p, i) => ({ x: i, y: (p.stats || {})[s.key], color: p.status === "applied" ? s.color : BAD }))
        .filter((p) => typeof p.y === "number" && Number.isFinite(p.y));
      layers.push({ kind: "line", label: s.label, color: s.color, points: pts }, { kind: "dots", color: s.color, points: pts });
    }
    chart($(id), layers, Object.assign({ slots: steps.length, xlabel: stepLabel(steps), legend: marked ? [{ label: "rolled back or lost", color: BAD }] : [] }, o));
  }
  function stepLabel(steps) { return (i) => ["#" + steps[i].step, clock(steps[i].time)]; }

  // reasons explain the store's reasons for dropping a sample.
  const reasons = {
    stale: "generated too many training steps before the served weights (trainer.max_staleness)",
    superseded: "the turn was scored again (feedback came later)",
    rolled_back: "trained in a step that a rollback undid",
    nonfinite: "in a step whose loss or gradient was not finite",
    error: "in a training step that failed",
    unusable: "nothing left to train on (every token masked, or no signal)",
  };

  function render(st) {
    const m = st.metrics || {}, s = st.stats || {}, h = st.history || { steps: [], versions: [], rewards: [] };
    $("model").textContent = st.model;
    $("version").textContent = "v" + st.weight_version;
    $("training").textContent = st.training ? "training" : "not training";
    $("training").className = st.training ? "badge" : "badge off";
    $("uptime").textContent = "up " + duration(st.uptime_s);
    $("updated").textContent = "updated " + new Date(st.now).toLocaleTimeString();
    const errs = $("errors");
    errs.textContent = (st.errors || []).join("; ");

    const samples = s.samples || {}, steps = s.steps || {}, turns = s.turns || {}, hints = s.hints || {};
    const recent = h.rewards.slice(-16);
    const guard = Object.keys(m).filter((k) => k.startsWith("clawrl_loop_guard_events_total{")).map((k) => k.replace(/^[^{]*\{[^=]*="([^"]*)".*$/, "$1") + " " + m[k]).join(", ");
    const last = h.steps.filter((p) => p.stats && Object.keys(p.stats).length > 0).pop();
    const ls = last ? last.stats : {};
    const cards = [
      card("weight version", "v" + st.weight_version, fmt(m.clawrl_loop_versions_published_total || 0) + " published since start"),
      card("training steps", fmt(steps.applied || 0), (steps.rolled_back || 0) + " rolled back, " + (steps.lost || 0) + " lost in a crash, " + fmt(m.clawrl_loop_train_steps_total || 0) + " since start"),
      card("last step", last ? "#" + last.step : "–", last ? "KL " + fmt(ls.kl) + ", entropy " + fmt(ls.entropy) + ", grad norm " + fmt(ls.grad_norm) +
        ", lr " + (ls.lr === undefined ? "–" : ls.lr.toExponential(1)) + ", " + fmt(ls.tokens) + " tokens in " + fmt(ls.seconds, 1) + " s" : "no step recorded with its numbers"),
      card("samples", fmt(samples.trained || 0) + " trained", (samples.queued || 0) + " queued, " + sum(s.dropped) + " dropped"),
      card("hints", fmt(sum(hints)), (hints.trained || 0) + " trained, " + (hints.queued || 0) + " queued: corrections the hint judge wrote down"),
      card("reward, last 16 turns", recent.length ? fmt(recent.reduce((a, r) => a + r.reward, 0) / recent.length, 2) : "–",
        "judge and thumbs; the judge's own moving average " + (m.clawrl_loop_reward_moving_average === undefined ? "–" : fmt(m.clawrl_loop_reward_moving_average, 2))),
      card("held-out skill", m.clawrl_loop_skill === undefined || m.clawrl_loop_skill < 0 ? "–" : fmt(m.clawrl_loop_skill * 100, 1) + "%", "guard events since start: " + (guard || "none")),
      card("learning-rate scale", m.clawrl_loop_lr_scale === undefined ? "–" : fmt(m.clawrl_loop_lr_scale), "halved at each guard trip"),
      card("sessions", fmt(s.sessions || 0), fmt(sum(turns)) + " turns, " + fmt(s.feedback || 0) + " feedback"),
      card("tokens generated", fmt(m.clawrl_generated_tokens_total || 0), fmt(m.clawrl_prompt_tokens_total || 0) + " prompt tokens"),
      // The gauge counts the poll that read it: leave that one out.
      card("requests in flight", fmt(Math.max(0, (m.clawrl_http_requests_in_flight || 0) - 1)), fmt(apiRequests(m)) + " API requests since start"),
      card("KV cache", m.clawrl_kv_cache_usage_ratio === undefined ? "–" : fmt(m.clawrl_kv_cache_usage_ratio * 100, 1) + "%", "in use"),
      card("store", fmt((s.bytes || 0) / 1e6, 1) + " MB", "last version " + (s.last_version || 0)),
    ];
    $("cards").replaceChildren(...cards);

    const rewards = h.rewards.map((r, i) => ({ x: i, y: r.reward, color: r.reward > 0 ? GOOD : r.reward < 0 ? BAD : MUTED }));
    const avg = [];
    let acc = 0;
    for (let i = 0; i < rewards.length; i++) {
      acc += rewards[i].y;
      if (i >= 16) acc -= rewards[i - 16].y;
      avg.push({ x: i, y: acc / Math.min(i + 1, 16) });
    }
    chart($("rewardchart"), [{ kind: "dots", label: "a turn's reward", color: MUTED, points: rewards }, { kind: "line", label: "mean of 16", color: BLUE, points: avg }],
      { ymin: -1, ymax: 1, xlabel: (i) => [clock(h.rewards[i].time)] });
    const loss = h.steps.map((p, i) => ({ x: i, y: p.loss, color: p.status === "applied" ? BLUE : BAD }));
    const marked = h.steps.some((p) => p.status !== "applied") ? [{ label: "rolled back or lost", color: BAD }] : [];
    chart($("losschart"), [{ kind: "line", label: "loss", color: "#9fb6ee", points: loss }, { kind: "dots", color: BLUE, points: loss }],
      { slots: h.steps.length, xlabel: stepLabel(h.steps), legend: marked });
    // x is the step's place among all steps, so the bars line up with the other step charts.
    const sr = h.steps.map((p, i) => ({ x: i, y: p.reward })).filter((p) => p.y !== undefined && p.y !== null);
    chart($("steprewardchart"), [{ kind: "bars", points: sr }], { ymin: -1, ymax: 1, slots: h.steps.length, xlabel: stepLabel(h.steps) });
    stepChart("klchart", h.steps, [{ key: "kl", label: "KL to the reference", color: BLUE }, { key: "step_kl", label: "step KL (trust region)", color: ORANGE }]);
    stepChart("entropychart", h.steps, [{ key: "entropy", label: "entropy (nats per token)", color: BLUE }]);
    stepChart("gradchart", h.steps, [{ key: "grad_norm", label: "gradient norm (before clipping)", color: BLUE }]);
    stepChart("lrchart", h.steps, [{ key: "lr", label: "learning rate", color: BLUE }]);

    const rows = h.versions.slice().reverse().slice(0, 30).map((v) => {
      // A rollback's note names its reason: "rollback to N (kl): KL to the reference 6.1 > 4".
      const tr = el("tr");
      if (/^rollback to |rolled back/.test(v.note || "")) tr.className = "rollback";
      tr.append(el("td", "v" + v.number), el("td", v.parent ? "v" + v.parent : ""), el("td", String(v.step)), el("td", new Date(v.time).toLocaleString()), el("td", v.note || ""));
      return tr;
    });
    if (rows.length === 0) { const tr = el("tr"); const td = el("td", "no versions recorded yet", "empty"); td.colSpan = 5; tr.append(td); rows.push(tr); }
    $("versions").replaceChildren(...rows);

    const dropped = Object.keys(s.dropped || {}).sort((a, b) => s.dropped[b] - s.dropped[a]).map((r) => {
      const tr = el("tr");
      tr.append(el("td", r), el("td", fmt(s.dropped[r])), el("td", reasons[r] || ""));
      return tr;
    });
    if (dropped.length === 0) { const tr = el("tr"); const td = el("td", "no sample dropped", "empty"); td.colSpan = 3; tr.append(td); dropped.push(tr); }
    $("dropped").replaceChildren(...dropped);
  }

  async function poll() {
    let state;
    try {
      const headers = key ? { Authorization: "Bearer " + key } : {};
      const resp = await fetch("/dashboard/state", { headers: headers, cache: "no-store" });
      if (resp.status === 401) {
        $("key").style.display = "block";
        $("model").textContent = "needs an API key";
      } else if (!resp.ok) {
        $("errors").textContent = "the daemon answered " + resp.status;
      } else {
        $("key").style.display = "none";
        state = await resp.json();
      }
    } catch (e) {
      $("errors").textContent = "the daemon is not answering (" + e.message + "); retrying";
    }
    if (state) {
      try {
        render(state);
      } catch (e) {
        $("errors").textContent = "this page could not draw the daemon's state: " + e.message;
      }
    }
    setTimeout(poll, 2000);
  }

  $("key").addEventListener("submit", (ev) => {
    ev.preventDefault();
    key = $("keyinput").value.trim();
    localStorage.setItem("clawrl-key", key);
    $("key").style.display = "none";
  });
  poll();
})();
