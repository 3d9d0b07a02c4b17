// The step-through view, part 4: the beam search tree (panel 9). Columns are steps; each
// candidate hangs from the beam it extends; kept, finished and pruned candidates are coloured
// apart and the chosen output is outlined. A table below lists the same candidates.
"use strict";

const STATUS = {
  kept: { fill: "#e7eefb", stroke: "#1f5fbf", ink: "#1d2330" },
  finished: { fill: "#e3f4e8", stroke: "#1b7f3b", ink: "#1d2330" },
  pruned: { fill: "#f3f5f9", stroke: "#9aa3b2", ink: "#5b6477" },
};
const NODE = { step: 0, parent: 1, piece: 2, token: 3, logp: 4, status: 5, score: 6, lp: 7 };

// The pieces from the root to node i.
function prefixOf(nodes, i) {
  const pieces = [];
  for (let n = i; n !== null && n !== undefined && n >= 0; n = nodes[n][NODE.parent]) {
    pieces.unshift(nodes[n][NODE.piece]);
  }
  return pieces;
}

// Each node's row in its column: children grouped under their parent, parents in order.
function layout(nodes, lastStep) {
  const row = new Array(nodes.length).fill(0);
  let tallest = 1;
  for (let step = 0; step <= lastStep; step++) {
    const here = nodes.map((n, i) => i).filter((i) => nodes[i][NODE.step] === step);
    here.sort((a, b) => {
      const pa = nodes[a][NODE.parent], pb = nodes[b][NODE.parent];
      const ra = pa === null ? 0 : row[pa], rb = pb === null ? 0 : row[pb];
      return ra - rb || nodes[b][NODE.logp] - nodes[a][NODE.logp];
    });
    here.forEach((i, k) => { row[i] = k; });
    tallest = Math.max(tallest, here.length);
  }
  return { row, tallest };
}

View.panels.beam = function (body, data) {
  const beam = data.beam;
  const nodes = beam.nodes;
  const chosen = new Set();
  const best = beam.nbest.length ? beam.nbest[0].node : null;
  for (let n = best; n !== null && n !== undefined && n >= 0; n = nodes[n][NODE.parent]) chosen.add(n);
  body.append(View.el("p", "", `Beam size K = ${beam.beam_size}, length penalty α = ` +
    `${beam.alpha}, at most ${beam.max_len} tokens before </s>. The search ran ` +
    `${beam.last_step + 1} steps and kept ${beam.nbest.length} finished hypothesis` +
    `${beam.nbest.length === 1 ? "" : "es"}.`));
  const key = View.el("p", "tree-legend");
  for (const [status, look] of Object.entries(STATUS)) {
    const item = View.el("span");
    const sw = View.el("span", "swatch");
    sw.style.background = look.fill;
    sw.style.border = `2px solid ${look.stroke}`;
    item.append(sw, View.el("span", "", status));
    key.append(item);
  }
  const mark = View.el("span");
  const sw = View.el("span", "swatch");
  sw.style.border = "3px solid #f0a500";
  mark.append(sw, View.el("span", "", "the chosen output"));
  key.append(mark);
  body.append(key);
  body.append(View.tree(nodes, beam.last_step, chosen));
  body.append(View.el("h3", "", "The finished hypotheses (n-best), best score first"));
  body.append(nbestTable(beam, nodes));
  body.append(View.el("h3", "", "Scores fall as the sentence grows"));
  body.append(View.fall(nodes, beam.last_step));
  const details = View.el("details");
  details.append(View.el("summary", "", "Every candidate, step by step"), candidatesTable(nodes));
  body.append(details);
};

View.tree = function (nodes, lastStep, chosen) {
  const ns = "http://www.w3.org/2000/svg";
  const colW = 104, rowH = 38, boxW = 92, boxH = 32, left = 52;
  const { row, tallest } = layout(nodes, lastStep);
  const W = left + (lastStep + 1) * colW + 8, H = tallest * rowH + 8;
  const svg = document.createElementNS(ns, "svg");
  svg.setAttribute("width", W);
  svg.setAttribute("height", H);
  svg.setAttribute("viewBox", `0 0 ${W} ${H}`);
  svg.setAttribute("role", "img");
  svg.setAttribute("aria-label", `Beam search tree: ${nodes.length} candidates over ` +
                   `${lastStep + 1} steps; the table below lists them`);
  const add = (parent, tag, attrs, text) => {
    const node = document.createElementNS(ns, tag);
    Object.entries(attrs).forEach(([k, v]) => node.setAttribute(k, String(v)));
    if (text !== undefined) node.textContent = text;
    parent.append(node);
    return node;
  };
  const cx = (step) => left + step * colW;
  const cy = (r) => 4 + r * rowH + boxH / 2;
  add(svg, "text", { x: 4, y: cy(0) + 4, "font-size": 12 }, "<s>");
  nodes.forEach((n, i) => {
    const parent = n[NODE.parent];
    const x0 = parent === null ? 30 : cx(n[NODE.step] - 1) + boxW;
    const y0 = parent === null ? cy(0) : cy(row[parent]);
    const onPath = chosen.has(i);
    add(svg, "path", { d: `M${x0},${y0} C${x0 + 8},${y0} ${cx(n[NODE.step]) - 8},${cy(row[i])} ` +
                          `${cx(n[NODE.step])},${cy(row[i])}`,
                       fill: "none", stroke: onPath ? "#f0a500" : "#c3c9d4",
                       "stroke-width": onPath ? 3 : 1 });
  });
  nodes.forEach((n, i) => {
    const look = STATUS[n[NODE.status]];
    const g = add(svg, "g", {});
    const x = cx(n[NODE.step]), y = 4 + row[i] * rowH;
    add(g, "rect", { x, y, width: boxW, height: boxH, rx: 4, fill: look.fill,
                     stroke: chosen.has(i) ? "#f0a500" : look.stroke,
                     "stroke-width": chosen.has(i) ? 3 : 1.2 });
    const piece = n[NODE.piece].length > 11 ? n[NODE.piece].slice(0, 10) + "…" : n[NODE.piece];
    add(g, "text", { x: x + 5, y: y + 13, "font-size": 12, fill: look.ink }, piece);
    const score = n[NODE.status] === "finished" ? ` → ${n[NODE.score].toFixed(2)}` : "";
    add(g, "text", { x: x + 5, y: y + 27, "font-size": 10, fill: look.ink },
        `${n[NODE.logp].toFixed(2)}${score}`);
    const lp = n[NODE.status] === "finished"
      ? `, lp = ${n[NODE.lp].toFixed(3)}, score = ${n[NODE.score].toFixed(4)}` : "";
    add(g, "title", {}, `${prefixOf(nodes, i).join(" ")}: ${n[NODE.status]}, log P = ` +
        `${n[NODE.logp].toFixed(4)}${lp}`);
  });
  const box = View.el("div", "scroll");
  box.tabIndex = 0;
  box.setAttribute("aria-label", "beam search tree, scrollable");
  box.append(svg);
  return box;
};

function nbestTable(beam, nodes) {
  const table = View.el("table", "numbers");
  const head = View.el("tr");
  ["rank", "hypothesis", "|Y|", "log P(Y|X)", "lp(Y)", "score"].forEach((h) => {
    head.append(View.el("th", "", h));
  });
  table.append(head);
  beam.nbest.forEach((h, k) => {
    const tr = View.el("tr");
    const lp = h.node === null ? NaN : nodes[h.node][NODE.lp];
    [String(k + 1), h.pieces.join(" ") || "(empty)", String(h.pieces.length + 1),
     h.log_prob.toFixed(4), lp.toFixed(4), h.score.toFixed(4)].forEach((v) => tr.append(View.el("td", "", v)));
    table.append(tr);
  });
  const box = View.el("div", "scroll");
  box.append(table);
  return box;
}

function candidatesTable(nodes) {
  const table = View.el("table", "numbers");
  const head = View.el("tr");
  ["step", "prefix", "log P", "status", "score"].forEach((h) => head.append(View.el("th", "", h)));
  table.append(head);
  nodes.forEach((n, i) => {
    const tr = View.el("tr");
    [String(n[NODE.step] + 1), prefixOf(nodes, i).join(" "), n[NODE.logp].toFixed(4), n[NODE.status],
     n[NODE.score] === null ? "" : n[NODE.score].toFixed(4)].forEach((v) => {
      tr.append(View.el("td", "", v));
    });
    table.append(tr);
  });
  const box = View.el("div", "scroll");
  box.append(table);
  return box;
}

// The best beam's log P at every step (it only falls), and each finished hypothesis's log P
// and its score log P / lp.
View.fall = function (nodes, lastStep) {
  const ns = "http://www.w3.org/2000/svg";
  const W = 600, H = 200, left = 44, right = 10, top = 10, bottom = 26;
  const best = [];
  for (let s = 0; s <= lastStep; s++) {
    const kept = nodes.filter((n) => n[NODE.step] === s && n[NODE.status] === "kept");
    best.push(kept.length ? Math.max(...kept.map((n) => n[NODE.logp])) : null);
  }
  const finished = nodes.filter((n) => n[NODE.status] === "finished");
  const all = [...best.filter((v) => v !== null), ...finished.map((n) => n[NODE.score])];
  const lo = Math.min(...all, -1), hi = 0;
  const x = (s) => left + (s / Math.max(lastStep, 1)) * (W - left - right);
  const y = (v) => top + ((hi - v) / (hi - lo)) * (H - top - bottom);
  const svg = document.createElementNS(ns, "svg");
  svg.setAttribute("viewBox", `0 0 ${W} ${H}`);
  svg.setAttribute("width", "100%");
  svg.setAttribute("role", "img");
  svg.setAttribute("aria-label", "Best log-probability per step, falling as the prefix grows; " +
                   "finished hypotheses as their log P and their length-penalised score");
  const add = (tag, attrs, text) => {
    const node = document.createElementNS(ns, tag);
    Object.entries(attrs).forEach(([k, v]) => node.setAttribute(k, String(v)));
    if (text !== undefined) node.textContent = text;
    svg.append(node);
    return node;
  };
  [lo, lo / 2, 0].forEach((v) => {
    add("line", { x1: left, x2: W - right, y1: y(v), y2: y(v), stroke: "#e3e7ee" });
    add("text", { x: left - 4, y: y(v) + 4, "text-anchor": "end", "font-size": 11 }, v.toFixed(1));
  });
  for (let s = 0; s <= lastStep; s += Math.max(1, Math.ceil(lastStep / 10))) {
    add("text", { x: x(s), y: H - 8, "text-anchor": "middle", "font-size": 11 }, String(s + 1));
  }
  const points = best.map((v, s) => (v === null ? null : `${x(s)},${y(v)}`)).filter(Boolean);
  add("polyline", { points: points.join(" "), fill: "none", stroke: "#1f5fbf", "stroke-width": 2 });
  finished.forEach((n) => {
    add("circle", { cx: x(n[NODE.step]), cy: y(n[NODE.logp]), r: 4, fill: "#ffffff",
                    stroke: "#1b7f3b", "stroke-width": 2 });
    add("circle", { cx: x(n[NODE.step]), cy: y(n[NODE.score]), r: 4, fill: "#1b7f3b" });
  });
  const figure = View.el("figure");
  const caption = "x: step; blue line: the best kept beam's log P; green rings: finished " +
                  "hypotheses' log P; green dots: their score log P / lp";
  figure.append(View.el("figcaption", "", caption), svg);
  return figure;
};
