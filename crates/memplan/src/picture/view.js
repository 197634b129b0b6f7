// The interactive plan picture of `memplan plan --html`: draws the blocks of the plan on a
// canvas (x: schedule step, y: arena address), with zoom, pan, hover details and search.
"use strict";
(function () {
  const D = JSON.parse(document.getElementById("data").textContent);
  const B = D.blocks.map((b, i) => ({
    // `bytes` is the span drawn: a strided Concat part's runs from first to last.
    i, first: b[0], last: b[1], offset: b[2], bytes: b[3], cat: b[4], alias: b[5],
    storage: b[6], name: b[7], op: b[8], kind: b[9], shape: b[10], dtype: b[11], parent: b[12],
    own: b[13], rows: b[14], id: b[15],
  }));
  const cats = D.categories.map((c) => ({ label: c[0], colour: c[1], peak: c[2], bytes: c[3] }));
  // Blocks are drawn at least this wide (pixels): one step of thousands stays visible.
  const MIN_W = 4;
  const steps = Math.max(D.steps, 1);
  const maxLive = D.live.reduce((a, b) => Math.max(a, b), 0);
  const yTop = Math.max(D.arena, D.lower, maxLive, 1);
  const canvas = document.getElementById("plot");
  const ctx = canvas.getContext("2d");
  const tip = document.getElementById("tip");
  const search = document.getElementById("search");
  const matchesEl = document.getElementById("matches");
  const M = { left: 86, right: 16, top: 22, bottom: 40 };
  let view = { x0: 0, x1: steps, y0: 0, y1: yTop * 1.02 };
  let hover = -1, selected = -1, matches = null, matchAt = -1, focusCat = -1;
  // Blocks in drawing order: storages first, aliases over them.
  const order = B.filter((b) => b.alias === 0).concat(B.filter((b) => b.alias !== 0));

  function human(n) {
    const units = ["KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    if (n < 1024) return n + " B";
    let u = -1, v = n;
    while (v >= 1024 && u < units.length - 1) { v /= 1024; u++; }
    return v.toFixed(2) + " " + units[u];
  }
  function group(n) { return n.toLocaleString("en-US"); }
  function stepsText(b) { return b.first === b.last ? String(b.first) : b.first + "-" + b.last; }
  // A block's left and right edges on screen, at least MIN_W apart around its place.
  function edges(b) {
    let x0 = px(b.first), x1 = px(b.last + 1);
    if (x1 - x0 < MIN_W) { const m = (x0 + x1) / 2; x0 = m - MIN_W / 2; x1 = m + MIN_W / 2; }
    return [x0, x1];
  }
  function esc(s) {
    return String(s).replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]);
  }

  // Header and side panel.
  document.getElementById("title").textContent = D.graph + ": arena " + human(D.arena);
  const ratio = D.lower > 0 ? (D.arena / D.lower).toFixed(3) + "x" : "-";
  document.getElementById("summary").innerHTML =
    "<b>" + human(D.arena) + "</b> activation arena (" + group(D.arena) + " bytes), " +
    ratio + " the lower bound of " + human(D.lower) + " (no placement can use less); weights " +
    human(D.weights) + " in their own region; " + D.steps + " steps, " + B.length + " buffers; peak " +
    human(D.live[D.peak] || 0) + " live at step " + D.peak + " (" + esc(D.ops[D.peak] || "") + ").";
  const legend = document.getElementById("legend");
  cats.forEach((c, k) => {
    const row = document.createElement("div");
    row.className = "row";
    row.title = human(c.peak) + " live at the peak, " + human(c.bytes) + " over the whole run; click: highlight the blocks of this colour";
    row.innerHTML = '<span><span class="swatch" style="background:' + c.colour + '"></span>' + esc(c.label) +
      '</span><span class="num">' + human(c.peak) + "</span>";
    row.addEventListener("click", () => { focusCat = focusCat === k ? -1 : k; draw(); });
    legend.appendChild(row);
  });
  legend.insertAdjacentHTML("beforeend",
    '<div class="row"><span><span class="swatch" style="background:#bbb;border:1px dashed #222"></span>dashed: view or in-place output</span></div>' +
    '<div class="row"><span><span class="line"></span>live bytes</span></div>' +
    '<div class="row"><span><span class="line" style="border-top:2px dashed #c0392b"></span>lower bound</span></div>' +
    '<div class="row"><span><span class="line" style="border-top:2px dotted #8e44ad"></span>peak step</span></div>');
  const peak = document.getElementById("peak");
  peak.querySelector("h2").textContent = "live at step " + D.peak + " (the peak), largest first";
  D.atPeak.forEach((i) => {
    const b = B[i];
    const row = document.createElement("div");
    row.className = "row";
    const how = b.alias === 1 ? " (view of " + b.parent + ")" : b.alias === 2 ? " (over " + b.parent + ")" : b.alias === 3 ? " (part of " + b.parent + ")" : "";
    row.title = b.name + how + ", " + b.op + ", steps " + stepsText(b);
    row.innerHTML = "<span>" + esc(b.name + how) + '</span><span class="num">' + human(b.own) + "</span>";
    row.addEventListener("click", () => { selected = i; zoomTo(b); });
    row.addEventListener("mouseenter", () => { hover = i; draw(); });
    row.addEventListener("mouseleave", () => { hover = -1; draw(); });
    peak.appendChild(row);
  });

  // Geometry.
  let W = 0, H = 0;
  function resize() {
    const r = canvas.getBoundingClientRect();
    const dpr = window.devicePixelRatio || 1;
    W = r.width; H = r.height;
    canvas.width = Math.round(W * dpr); canvas.height = Math.round(H * dpr);
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    draw();
  }
  const px = (s) => M.left + (s - view.x0) / (view.x1 - view.x0) * (W - M.left - M.right);
  const py = (b) => H - M.bottom - (b - view.y0) / (view.y1 - view.y0) * (H - M.top - M.bottom);
  const sx = (x) => view.x0 + (x - M.left) / (W - M.left - M.right) * (view.x1 - view.x0);
  const sy = (y) => view.y0 + (H - M.bottom - y) / (H - M.top - M.bottom) * (view.y1 - view.y0);

  function ticks(lo, hi, target, unit) {
    const raw = (hi - lo) / unit / target;
    const mag = Math.pow(10, Math.floor(Math.log10(raw)));
    const step = [1, 2, 2.5, 5, 10].map((m) => m * mag).find((s) => s >= raw) * unit;
    const out = [];
    for (let v = Math.ceil(lo / step) * step; v <= hi && out.length < 200; v += step) out.push(v);
    return out;
  }
  function byteUnit(span) {
    const u = [[2 ** 40, "TiB"], [2 ** 30, "GiB"], [2 ** 20, "MiB"], [2 ** 10, "KiB"]];
    for (const [s, n] of u) if (span >= s) return [s, n];
    return [1, "B"];
  }

  let pending = false;
  function draw() {
    if (pending) return;
    pending = true;
    requestAnimationFrame(() => { pending = false; paint(); });
  }

  function paint() {
    ctx.clearRect(0, 0, W, H);
    const L = M.left, R = W - M.right, T = M.top, Bot = H - M.bottom;
    ctx.fillStyle = "#fafafa"; ctx.fillRect(L, T, R - L, Bot - T);
    // Grid and tick labels.
    ctx.font = "11px system-ui, sans-serif"; ctx.fillStyle = "#333"; ctx.strokeStyle = "#e6e6e6"; ctx.lineWidth = 1;
    const [unit, uname] = byteUnit(view.y1 - view.y0);
    ctx.textAlign = "right"; ctx.textBaseline = "middle";
    for (const t of ticks(Math.max(view.y0, 0), view.y1, 8, unit)) {
      const y = Math.round(py(t)) + 0.5;
      ctx.beginPath(); ctx.moveTo(L, y); ctx.lineTo(R, y); ctx.stroke();
      const v = t / unit;
      ctx.fillText((Math.abs(v - Math.round(v)) < 1e-9 ? Math.round(v) : v.toFixed(1)) + " " + uname, L - 6, y);
    }
    ctx.textAlign = "center"; ctx.textBaseline = "top";
    for (const t of ticks(Math.max(view.x0, 0), Math.min(view.x1, steps), 10, 1)) {
      if (Math.abs(t - Math.round(t)) > 1e-9) continue;
      const x = Math.round(px(t)) + 0.5;
      ctx.beginPath(); ctx.moveTo(x, T); ctx.lineTo(x, Bot); ctx.stroke();
      ctx.fillText(String(Math.round(t)), x, Bot + 4);
    }
    ctx.fillText("schedule step", (L + R) / 2, Bot + 20);
    ctx.save(); ctx.translate(14, (T + Bot) / 2); ctx.rotate(-Math.PI / 2); ctx.fillText("address in the arena", 0, -6); ctx.restore();

    // Training phases: a band along the top of the plot.
    for (const [name, a, b, colour] of (D.phases || [])) {
      const x0 = Math.max(px(a), L), x1 = Math.min(px(b + 1), R);
      if (x1 <= x0) continue;
      ctx.fillStyle = colour; ctx.fillRect(x0, T - 12, x1 - x0, 10);
      if (x1 - x0 > 60) { ctx.fillStyle = "#222"; ctx.textAlign = "left"; ctx.textBaseline = "middle"; ctx.fillText(name, x0 + 3, T - 7); }
    }
    ctx.save();
    ctx.beginPath(); ctx.rect(L, T, R - L, Bot - T); ctx.clip();
    const dim = matches !== null || focusCat >= 0;
    for (const b of order) {
      const [x0, x1] = edges(b);
      if (x1 < L || x0 > R) continue;
      const y0 = py(b.offset + b.bytes), y1 = py(b.offset);
      if (y1 < T || y0 > Bot) continue;
      const lit = (matches === null || matches.has(b.i)) && (focusCat < 0 || b.cat === focusCat);
      ctx.globalAlpha = dim && !lit ? 0.12 : b.alias === 1 ? 0.6 : 1;
      ctx.fillStyle = cats[b.cat] ? cats[b.cat].colour : "#999";
      ctx.fillRect(x0, y0, x1 - x0, Math.max(y1 - y0, 1));
      if (b.alias !== 0 && x1 - x0 > 6 && y1 - y0 > 6) {
        ctx.globalAlpha = dim && !lit ? 0.2 : 0.9;
        ctx.setLineDash(b.alias === 1 ? [3, 2] : b.alias === 3 ? [4, 1, 1, 1] : [1, 2]);
        ctx.strokeStyle = "#222"; ctx.lineWidth = 0.8;
        ctx.strokeRect(x0 + 0.5, y0 + 0.5, x1 - x0 - 1, y1 - y0 - 1);
        ctx.setLineDash([]);
      }
    }
    ctx.globalAlpha = 1;
    // Labels on the largest blocks: inside where they fit (across, or up a tall narrow
    // block); the very largest get one beside them otherwise.
    ctx.font = "11px system-ui, sans-serif"; ctx.fillStyle = "#111"; ctx.lineWidth = 3; ctx.strokeStyle = "rgba(255,255,255,0.75)";
    ctx.lineJoin = "round";
    let labelled = 0;
    const placed = [];
    // Whether a label's box is free; takes it if so.
    function claim(x0, y0, x1, y1) {
      if (placed.some((r) => x0 < r[2] && r[0] < x1 && y0 < r[3] && r[1] < y1)) return false;
      placed.push([x0, y0, x1, y1]);
      return true;
    }
    function fit(full, room) {
      let text = full;
      while (text.length > 5 && ctx.measureText(text).width > room - 6) text = text.slice(0, -2);
      if (text.length <= 5) return null;
      return text === full ? text : text + "…";
    }
    function label(text, x, y, align, rotate) {
      ctx.save(); ctx.translate(x, y); if (rotate) ctx.rotate(-Math.PI / 2);
      ctx.textAlign = align; ctx.textBaseline = "middle";
      ctx.strokeText(text, 0, 0); ctx.fillText(text, 0, 0); ctx.restore();
    }
    D.largest.forEach((i, rank) => {
      if (labelled >= 24) return;
      const b = B[i];
      const e = edges(b), x0 = Math.max(e[0], L), x1 = Math.min(e[1], R);
      const y0 = Math.max(py(b.offset + b.bytes), T), y1 = Math.min(py(b.offset), Bot);
      if (x1 <= x0 || y1 <= y0) return;
      const full = b.name + " " + human(b.own);
      let t;
      if (y1 - y0 >= 14 && x1 - x0 >= 40 && (t = fit(full, x1 - x0))) {
        if (!claim(x0, y0, x0 + ctx.measureText(t).width + 6, y0 + 16)) return;
        label(t, x0 + 3, y0 + 8, "left", false);
      } else if (x1 - x0 >= 13 && y1 - y0 >= 40 && (t = fit(full, y1 - y0))) {
        const c = (x0 + x1) / 2;
        if (!claim(c - 8, y1 - ctx.measureText(t).width - 6, c + 8, y1)) return;
        label(t, c, y1 - 3, "left", true);
      } else if (rank < 5 && y1 - y0 >= 4) {
        const mid = (y0 + y1) / 2, leftSide = x0 - L > R - x1;
        const edge = leftSide ? x0 : x1, tx = leftSide ? x0 - 14 : x1 + 14;
        const tw = ctx.measureText(full).width;
        if (!claim(leftSide ? tx - tw : tx, mid - 8, leftSide ? tx : tx + tw, mid + 8)) return;
        ctx.strokeStyle = "#111"; ctx.lineWidth = 1; ctx.beginPath(); ctx.moveTo(edge, mid); ctx.lineTo(leftSide ? x0 - 12 : x1 + 12, mid); ctx.stroke();
        ctx.lineWidth = 3; ctx.strokeStyle = "rgba(255,255,255,0.75)";
        label(full, tx, mid, leftSide ? "right" : "left", false);
      } else return;
      labelled++;
    });
    // Hovered, selected and searched blocks.
    function outline(i, colour, width) {
      if (i < 0) return;
      const b = B[i];
      ctx.strokeStyle = colour; ctx.lineWidth = width;
      const [x0, x1] = edges(b), y0 = py(b.offset + b.bytes);
      ctx.strokeRect(x0, y0, x1 - x0, Math.max(py(b.offset) - y0, 1));
    }
    if (matches !== null && matches.size <= 200) for (const i of matches) outline(i, "#000", 1.2);
    outline(selected, "#d35400", 2.5);
    outline(hover, "#000", 2);
    if (hover >= 0 && B[hover].alias !== 0) {
      // Tie an alias to its storage.
      outline(B[hover].storage, "#d35400", 1.5);
    }
    // Live bytes, lower bound, arena, peak.
    ctx.strokeStyle = "#111"; ctx.lineWidth = 1.5; ctx.beginPath();
    D.live.forEach((v, s) => {
      const y = py(v);
      if (s === 0) ctx.moveTo(px(0), y); else ctx.lineTo(px(s), y);
      ctx.lineTo(px(s + 1), y);
    });
    ctx.stroke();
    ctx.setLineDash([6, 4]); ctx.strokeStyle = "#c0392b"; ctx.beginPath();
    ctx.moveTo(L, py(D.lower)); ctx.lineTo(R, py(D.lower)); ctx.stroke();
    ctx.setLineDash([]); ctx.strokeStyle = "#333"; ctx.lineWidth = 1; ctx.beginPath();
    ctx.moveTo(L, py(D.arena)); ctx.lineTo(R, py(D.arena)); ctx.stroke();
    ctx.setLineDash([2, 3]); ctx.strokeStyle = "#8e44ad"; ctx.lineWidth = 1.5; ctx.beginPath();
    const xp = px(D.peak + 0.5);
    ctx.moveTo(xp, T); ctx.lineTo(xp, Bot); ctx.stroke(); ctx.setLineDash([]);
    if (xp >= L && xp <= R) {
      ctx.fillStyle = "#8e44ad"; ctx.font = "bold 12px system-ui, sans-serif";
      ctx.textAlign = xp > (L + R) / 2 ? "right" : "left";
      ctx.fillText("peak: step " + D.peak + ", " + human(D.live[D.peak] || 0) + " live", xp + (xp > (L + R) / 2 ? -4 : 4), T + 3);
    }
    ctx.fillStyle = "#c0392b"; ctx.textBaseline = "top"; ctx.font = "11px system-ui, sans-serif";
    const peakRight = xp > (L + R) / 2;
    ctx.textAlign = peakRight ? "left" : "right";
    ctx.fillText("lower bound " + human(D.lower), peakRight ? L + 4 : R - 4, py(D.lower) + 3);
    ctx.restore();
    ctx.strokeStyle = "#999"; ctx.lineWidth = 1; ctx.strokeRect(L + 0.5, T + 0.5, R - L - 1, Bot - T - 1);
  }

  // Which block is under the pointer: the smallest one (a view over its parent wins).
  function pick(x, y) {
    const b = sy(y);
    let best = -1;
    for (const k of B) {
      const e = edges(k);
      if (x >= e[0] && x < e[1] && b >= k.offset && b < k.offset + k.bytes) {
        if (best < 0 || k.bytes < B[best].bytes) best = k.i;
      }
    }
    return best;
  }

  function showTip(i, x, y) {
    if (i < 0) { tip.hidden = true; return; }
    const b = B[i];
    const alias = b.alias === 1 ? "view of " + esc(b.parent) : b.alias === 2 ? "written in place over " + esc(b.parent) : b.alias === 3 ? "written into its slice of " + esc(b.parent) : "";
    const rows = [
      ["op", esc(b.op) + " (" + esc(b.kind) + ")"],
      ["shape", esc(b.dtype) + " " + esc(b.shape)],
      ["bytes", human(b.own) + " (" + group(b.own) + ")" + (b.rows > 1 ? ", in " + b.rows + " runs, one per row of the Concat's output" : "")],
      ["offset", group(b.offset) + " … " + group(b.offset + b.bytes)],
      ["lifetime", "steps " + stepsText(b) + " (" + (b.last - b.first + 1) + (b.last === b.first ? " step; " : " steps; ") + esc(D.ops[b.first] || "") + " … " + esc(D.ops[b.last] || "") + ")"],
    ];
    if (alias) rows.push(["shares", alias]);
    tip.innerHTML = '<div class="name">' + esc(b.name) + "</div><table>" +
      rows.map((r) => "<tr><td>" + r[0] + "</td><td>" + r[1] + "</td></tr>").join("") + "</table>";
    tip.hidden = false;
    const wrap = canvas.parentElement.getBoundingClientRect();
    const tw = tip.offsetWidth, th = tip.offsetHeight;
    let left = x + 14, top = y + canvas.offsetTop + 14;
    if (left + tw > wrap.width - 4) left = x - tw - 14;
    if (top + th > wrap.height - 4) top = y + canvas.offsetTop - th - 14;
    tip.style.left = Math.max(left, 0) + "px"; tip.style.top = Math.max(top, 0) + "px";
  }

  function zoomTo(b) {
    const w = Math.max(b.last + 1 - b.first, 1), h = Math.max(b.bytes, 1);
    view = {
      x0: Math.max(b.first - 2 * w, 0), x1: Math.min(b.last + 1 + 2 * w, steps),
      y0: Math.max(b.offset - 2 * h, 0), y1: Math.min(b.offset + 3 * h, yTop * 1.02),
    };
    if (view.x1 - view.x0 < 4) view.x1 = view.x0 + 4;
    draw();
  }

  // Zoom and pan.
  canvas.addEventListener("wheel", (e) => {
    e.preventDefault();
    const r = canvas.getBoundingClientRect();
    const x = e.clientX - r.left, y = e.clientY - r.top;
    const f = Math.exp(Math.sign(e.deltaY) * 0.18);
    const s = sx(x), b = sy(y);
    if (!e.altKey) {
      const w = Math.min(Math.max((view.x1 - view.x0) * f, 2), steps * 1.5);
      view.x0 = s - (s - view.x0) * w / (view.x1 - view.x0); view.x1 = view.x0 + w;
    }
    if (!e.shiftKey) {
      const h = Math.min(Math.max((view.y1 - view.y0) * f, 16), yTop * 1.5);
      view.y0 = b - (b - view.y0) * h / (view.y1 - view.y0); view.y1 = view.y0 + h;
    }
    draw();
  }, { passive: false });
  let drag = null;
  canvas.addEventListener("mousedown", (e) => {
    drag = { x: e.clientX, y: e.clientY, v: Object.assign({}, view), moved: false };
    canvas.classList.add("dragging");
  });
  window.addEventListener("mouseup", (e) => {
    if (drag && !drag.moved) {
      const r = canvas.getBoundingClientRect();
      selected = pick(e.clientX - r.left, e.clientY - r.top);
      draw();
    }
    drag = null; canvas.classList.remove("dragging");
  });
  canvas.addEventListener("mousemove", (e) => {
    const r = canvas.getBoundingClientRect();
    const x = e.clientX - r.left, y = e.clientY - r.top;
    if (drag) {
      const dx = e.clientX - drag.x, dy = e.clientY - drag.y;
      if (Math.abs(dx) + Math.abs(dy) > 2) drag.moved = true;
      const ds = dx / (W - M.left - M.right) * (drag.v.x1 - drag.v.x0);
      const db = dy / (H - M.top - M.bottom) * (drag.v.y1 - drag.v.y0);
      view = { x0: drag.v.x0 - ds, x1: drag.v.x1 - ds, y0: drag.v.y0 + db, y1: drag.v.y1 + db };
      tip.hidden = true; draw(); return;
    }
    const i = pick(x, y);
    if (i !== hover) { hover = i; draw(); }
    showTip(i, x, y);
  });
  canvas.addEventListener("mouseleave", () => { hover = -1; tip.hidden = true; draw(); });
  function reset() { view = { x0: 0, x1: steps, y0: 0, y1: yTop * 1.02 }; draw(); }
  canvas.addEventListener("dblclick", reset);
  document.getElementById("reset").addEventListener("click", reset);

  // Search.
  function runSearch() {
    const q = search.value.trim().toLowerCase();
    matchAt = -1;
    if (!q) { matches = null; matchesEl.textContent = ""; draw(); return; }
    matches = new Set(B.filter((b) => b.name.toLowerCase().includes(q) || b.op.toLowerCase().includes(q)).map((b) => b.i));
    matchesEl.textContent = matches.size + (matches.size === 1 ? " match" : " matches");
    draw();
  }
  search.addEventListener("input", runSearch);
  search.addEventListener("keydown", (e) => {
    if (e.key !== "Enter" || matches === null || matches.size === 0) return;
    const list = Array.from(matches).sort((a, b) => B[a].first - B[b].first || a - b);
    matchAt = (matchAt + 1) % list.length;
    selected = list[matchAt];
    matchesEl.textContent = (matchAt + 1) + " of " + list.length;
    zoomTo(B[selected]);
  });

  window.addEventListener("resize", resize);
  // `?q=TEXT` searches; `?tensor=NAME` zooms to a tensor and shows its details, and so does
  // `?tensor_id=N` for the tensor with id N (as `memplan check --format json` names it).
  const params = new URLSearchParams(location.search);
  const q = params.get("q");
  if (q) { search.value = q; runSearch(); }
  resize();
  const wanted = params.get("tensor");
  const wantedId = params.get("tensor_id");
  let named;
  if (wanted !== null) {
    named = B.find((b) => b.name === wanted);
    if (!named) {
      matchesEl.textContent = "no tensor named \u201c" + wanted + "\u201d in this plan" +
        (B.some((b) => b.name.toLowerCase().includes(wanted.toLowerCase())) ? " (search finds similar names)" : "");
      matchesEl.className = "warning";
    }
  } else if (wantedId !== null) {
    named = B.find((b) => b.id !== null && String(b.id) === wantedId.trim());
    if (!named) {
      matchesEl.textContent = "no buffer of tensor id " + wantedId + " in this plan";
      matchesEl.className = "warning";
    }
  }
  if (named) {
    selected = named.i; hover = named.i; zoomTo(named);
    requestAnimationFrame(() => requestAnimationFrame(() => {
      const x = (px(named.first) + px(named.last + 1)) / 2, y = (py(named.offset) + py(named.offset + named.bytes)) / 2;
      showTip(named.i, x, y);
    }));
  }
})();
