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

  function svgEl(tag, attrs) {
    const e = document.createElementNS(SVGNS, tag);
    for (const a in attrs) e.setAttribute(a, attrs[a]);
    return e;
  }

  // chart draws series of points {x, y, color?} into svg, scaled to
  // [ymin, ymax]: kind "line", "dots" or "bars".
  function chart(svg, layers, ymin, ymax, slots) {
    while (svg.firstChild) svg.removeChild(svg.firstChild);
    const W = 400, H = 180, P = 6;
    let n = slots || 0;
    for (const l of layers) for (const p of l.points) n = Math.max(n, p.x + 1);
    if (n === 0) {
      const t = svgEl("text", { x: W / 2, y: H / 2, "text-anchor": "middle", fill: "#6b7385", "font-size": 12 });
      t.textContent = "nothing yet";
      svg.append(t);
      return;
    }
    if (ymax === undefined || ymin === undefined) {
      let lo = Infinity, hi = -Infinity;
      for (const l of layers) for (const p of l.points) { lo = Math.min(lo, p.y); hi = Math.max(hi, p.y); }
      if (ymin === undefined) ymin = lo;
      if (ymax === undefined) ymax = hi;
      if (ymax - ymin < 1e-9) { ymax += 1; ymin -= 1; }
    }
    const X = (i) => P + (n === 1 ? (W - 2 * P) / 2 : (i * (W - 2 * P)) / (n - 1));
    const Y = (y) => H - P - ((y - ymin) * (H - 2 * P)) / (ymax - ymin);
    if (ymin < 0 && ymax > 0) svg.append(svgEl("line", { x1: 0, x2: W, y1: Y(0), y2: Y(0), stroke: "#e3e6ec" }));
    for (const l of layers) {
      if (l.kind === "line" && l.points.length > 0) {
        const d = l.points.map((p, i) => (i ? "L" : "M") + X(p.x).toFixed(1) + " " + Y(p.y).toFixed(1)).join(" ");
        svg.append(svgEl("path", { d: d, fill: "none", stroke: l.color, "stroke-width": 2, "vector-effect": "non-scaling-stroke" }));
      } else if (l.kind === "dots") {
        for (const p of l.points) svg.append(svgEl("circle", { cx: X(p.x), cy: Y(p.y), r: 2.5, fill: p.color || l.color, "fill-opacity": 0.55 }));
      } else if (l.kind === "bars") {
        const w = Math.max(1, (W - 2 * P) / n - 2);
        for (const p of l.points) {
          const y0 = Y(Math.max(ymin, 0)), y1 = Y(p.y);
          svg.append(svgEl("rect", { x: X(p.x) - w / 2, y: Math.min(y0, y1), width: w, height: Math.max(1, Math.abs(y1 - y0)), fill: p.y >= 0 ? "#1f9d55" : "#d64545" }));
        }
      }
    }
    for (const [v, label] of [[ymax, fmt(ymax)], [ymin, fmt(ymin)]]) {
      const t = svgEl("text", { x: W - 2, y: Y(v) + (v === ymax ? 10 : -2), "text-anchor": "end", fill: "#6b7385", "font-size": 10 });
      t.textContent = label;
      svg.append(t);
    }
  }

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

    const samples = s.samples || {}, steps = s.steps || {}, turns = s.turns || {};
    const recent = h.rewards.slice(-16);
    const guard = Object.keys(m).filter((k) => k.startsWith("clawrl_loop_guard_events_total{")).map((k) => k.replace(/^[^{]*\{[^=]*="([^"]*)".*$/, "$1") + " " + m[k]).join(", ");
    const cards = [
      card("weight version", "v" + st.weight_version, fmt(m.clawrl_loop_versions_published_total || 0) + " published since start"),
      card("training steps", fmt(steps.applied || 0), (steps.rolled_back || 0) + " rolled back, " + (steps.lost || 0) + " lost in a crash, " + fmt(m.clawrl_loop_train_steps_total || 0) + " since start"),
      card("samples", fmt(samples.trained || 0) + " trained", (samples.queued || 0) + " queued, " + sum(s.dropped) + " dropped"),
      card("reward, last 16 turns", recent.length ? fmt(recent.reduce((a, r) => a + r.reward, 0) / recent.length, 2) : "–",
        "judge and thumbs; the judge's own moving average " + (m.clawrl_loop_reward_moving_average === undefined ? "–" : fmt(m.clawrl_loop_reward_moving_average, 2))),
      card("held-out skill", m.clawrl_loop_skill === undefined ? "–" : fmt(m.clawrl_loop_skill * 100, 1) + "%", "guard events since start: " + (guard || "none")),
      card("learning-rate scale", m.clawrl_loop_lr_scale === undefined ? "–" : fmt(m.clawrl_loop_lr_scale), "halved at each guard trip"),
      card("sessions", fmt(s.sessions || 0), fmt(sum(turns)) + " turns, " + fmt(s.feedback || 0) + " feedback"),
      card("tokens generated", fmt(m.clawrl_generated_tokens_total || 0), fmt(m.clawrl_prompt_tokens_total || 0) + " prompt tokens"),
      // The gauge counts the poll that read it: leave that one out.
      card("requests in flight", fmt(Math.max(0, (m.clawrl_http_requests_in_flight || 0) - 1)), fmt(apiRequests(m)) + " API requests since start"),
      card("KV cache", m.clawrl_kv_cache_usage_ratio === undefined ? "–" : fmt(m.clawrl_kv_cache_usage_ratio * 100, 1) + "%", "in use"),
      card("store", fmt((s.bytes || 0) / 1e6, 1) + " MB", "last version " + (s.last_version || 0)),
    ];
    $("cards").replaceChildren(...cards);

    const rewards = h.rewards.map((r, i) => ({ x: i, y: r.reward, color: r.reward > 0 ? "#1f9d55" : r.reward < 0 ? "#d64545" : "#6b7385" }));
    const avg = [];
    let acc = 0;
    for (let i = 0; i < rewards.length; i++) {
      acc += rewards[i].y;
      if (i >= 16) acc -= rewards[i - 16].y;
      avg.push({ x: i, y: acc / Math.min(i + 1, 16) });
    }
    chart($("rewardchart"), [{ kind: "dots", points: rewards }, { kind: "line", color: "#2f6fec", points: avg }], -1.05, 1.05);
    const loss = h.steps.map((p, i) => ({ x: i, y: p.loss, color: p.status === "applied" ? "#2f6fec" : "#d64545" }));
    chart($("losschart"), [{ kind: "line", color: "#c5d3f5", points: loss }, { kind: "dots", color: "#2f6fec", points: loss }]);
    // x is the step's place among all steps, so the bars line up with the loss chart.
    const sr = h.steps.map((p, i) => ({ x: i, y: p.reward })).filter((p) => p.y !== undefined && p.y !== null);
    chart($("steprewardchart"), [{ kind: "bars", points: sr }], -1, 1, h.steps.length);

    const rows = h.versions.slice().reverse().slice(0, 30).map((v) => {
      const tr = el("tr");
      if (/^rollback|rolled back/.test(v.note || "")) tr.className = "rollback";
      tr.append(el("td", "v" + v.number), el("td", v.parent ? "v" + v.parent : ""), el("td", String(v.step)), el("td", new Date(v.time).toLocaleString()), el("td", v.note || ""));
      return tr;
    });
    if (rows.length === 0) { const tr = el("tr"); const td = el("td", "no versions recorded yet", "empty"); td.colSpan = 5; tr.append(td); rows.push(tr); }
    $("versions").replaceChildren(...rows);
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
