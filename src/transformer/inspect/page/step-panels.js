// The step-through view, part 2: panels 1 to 8, each drawn from the data into its own body.
// A panel is redrawn when it is shown, when a control changes and when the window is resized.
"use strict";

View.panels = {};
View.state = { encoder: { layer: 0, head: 0 }, decoder: { layer: 0, head: 0, step: 0 },
               norm: { stack: 0, layer: 0 }, stream: 0 };

const dimName = (c) => `d${c}`;
const stackOf = (data, which) => (which === 0 ? data.encoder : data.decoder);
const produced = (data) => [...data.target.pieces.slice(1), "</s>"];

// The per-token statistics (mean and standard deviation over all d_model columns) as a table.
function statsTable(parent, stats, rows, names, caption) {
  const g = View.grid(stats);
  const table = View.el("table", "numbers");
  table.append(View.el("caption", "", caption));
  const head = View.el("tr");
  head.append(View.el("th", "", "token"));
  names.forEach((name) => {
    head.append(View.el("th", "", `mean of ${name}`), View.el("th", "", `std of ${name}`));
  });
  table.append(head);
  rows.forEach((label, t) => {
    const tr = View.el("tr");
    const th = View.el("th", "", label);
    th.scope = "row";
    tr.append(th);
    for (let k = 0; k < g.rows; k++) tr.append(View.el("td", "stat", View.fmt(g.get(k, t), 6)));
    table.append(tr);
  });
  const box = View.el("div", "scroll");
  box.append(table);
  parent.append(box);
}

View.panels.tokens = function (body, data) {
  body.append(View.el("h3", "", "Source: the encoder's input"));
  View.tokens(body, data.source.pieces, data.source.ids);
  body.append(View.el("h3", "", "Translation: the decoder's input"));
  View.tokens(body, data.target.pieces, data.target.ids);
  body.append(View.el("p", "", `${data.source.pieces.length} source tokens become the rows of ` +
    `X (${data.source.pieces.length} × ${data.model.d_model}); the decoder reads ` +
    `${data.target.pieces.length} tokens and predicts the next one after each.`));
};

View.controls = {};
View.controls.embeddings = function (box, data, redraw) {
  View.select(box, "stream", "Stack", ["encoder input (source)", "decoder input (target)"],
              View.state.stream, (i) => { View.state.stream = i; redraw(); });
};

View.panels.embeddings = function (body, data) {
  const stream = View.state.stream === 0 ? data.source : data.target;
  const rows = stream.pieces;
  body.append(View.el("p", "hint", `Rows: the tokens. Columns: the ${data.model.d_model} ` +
                      "dimensions, d0 at the left; hover or use the arrow keys to read a cell."));
  View.heatmap(body, View.grid(stream.embedding), { title: "Embedding(token)·√d_model", rows,
                                                     cols: [], split: 0 });
  View.heatmap(body, View.grid(stream.position), { title: `PE (${data.model.positional})`, rows });
  View.heatmap(body, View.grid(stream.input), { title: "X = embedding·√d_model + PE", rows });
  statsTable(body, stream.stats, rows, ["embedding", "PE", "X"],
             "Per token, over all d_model columns");
  body.append(View.el("h3", "", "The positional encodings, position by position"));
  View.sinusoids(body, data);
};

// PE(pos, dim) against pos for the plotted dimensions; the sentence's positions are shaded.
View.sinusoids = function (parent, data) {
  const g = View.grid(data.positions.table);
  const W = 640, H = 240, left = 34, right = 10, top = 10, bottom = 26;
  let lo = -1, hi = 1;
  for (let r = 0; r < g.rows; r++) {
    for (let c = 0; c < g.cols; c++) { lo = Math.min(lo, g.get(r, c)); hi = Math.max(hi, g.get(r, c)); }
  }
  const x = (p) => left + (p / Math.max(g.rows - 1, 1)) * (W - left - right);
  const y = (v) => top + (1 - (v - lo) / (hi - lo)) * (H - top - bottom);
  const ns = "http://www.w3.org/2000/svg";
  const svg = document.createElementNS(ns, "svg");
  svg.setAttribute("viewBox", `0 0 ${W} ${H}`);
  svg.setAttribute("width", "100%");
  svg.setAttribute("role", "img");
  const names = data.positions.dims.map((d) => `d${d} (${d % 2 ? "cos" : "sin"}, i = ${d >> 1})`);
  svg.setAttribute("aria-label", `Positional encoding of positions 0 to ${g.rows - 1} in ` +
                   `dimensions ${names.join(", ")}`);
  const add = (tag, attrs, text) => {
    const node = document.createElementNS(ns, tag);
    Object.entries(attrs).forEach(([k, v]) => node.setAttribute(k, String(v)));
    if (text !== undefined) node.textContent = text;
    svg.append(node);
    return node;
  };
  const S = Math.min(data.source.pieces.length, g.rows);
  add("rect", { x: x(0), y: top, width: x(S - 1) - x(0), height: H - top - bottom,
                fill: "#eef3fb" });
  add("line", { x1: left, x2: W - right, y1: y(0), y2: y(0), stroke: "#d5dae3" });
  [lo, 0, hi].forEach((v) => add("text", { x: left - 4, y: y(v) + 4, "text-anchor": "end",
                                           "font-size": 11 }, v.toFixed(1)));
  for (let p = 0; p < g.rows; p += 8) {
    add("text", { x: x(p), y: H - 8, "text-anchor": "middle", "font-size": 11 }, String(p));
  }
  const colours = ["#1f5fbf", "#d9480f", "#2b8a3e", "#862e9c", "#e8590c", "#0b7285", "#5f3dc4",
                   "#a61e4d", "#495057", "#087f5b", "#364fc7", "#c92a2a"];
  for (let c = 0; c < g.cols; c++) {
    const points = [];
    for (let r = 0; r < g.rows; r++) points.push(`${x(r).toFixed(1)},${y(g.get(r, c)).toFixed(1)}`);
    const line = add("polyline", { points: points.join(" "), fill: "none", "stroke-width": 1.5,
                                   stroke: colours[c % colours.length] });
    const title = document.createElementNS(ns, "title");
    title.textContent = names[c];
    line.append(title);
  }
  const figure = View.el("figure");
  figure.append(View.el("figcaption", "", "PE(pos, d) for pos = 0 … " + (g.rows - 1) +
                        "; shaded: this sentence's positions"), svg);
  const key = View.el("p", "legend");
  names.forEach((name, c) => {
    const sw = View.el("span", "swatch");
    sw.style.background = colours[c % colours.length];
    key.append(sw, View.el("span", "", name));
  });
  figure.append(key);
  parent.append(figure);
};

// Layer and head selectors bound to a part of View.state (encoder or decoder attention).
function layerHead(box, data, which, redraw, prefix) {
  const stack = which === "encoder" ? data.encoder : data.decoder;
  const heads = data.model.n_heads;
  const st = View.state[which];
  View.select(box, `${prefix}-layer`, "Layer", stack.map((_, i) => `layer ${i + 1}`), st.layer,
              (i) => { st.layer = i; redraw(); });
  View.select(box, `${prefix}-head`, "Head", Array.from({ length: heads }, (_, i) => `head ${i + 1}`),
              st.head, (i) => { st.head = i; redraw(); });
}

View.controls.qkv = (box, data, redraw) => layerHead(box, data, "encoder", redraw, "qkv");
View.controls.scores = (box, data, redraw) => layerHead(box, data, "encoder", redraw, "sc");
View.controls.heads = (box, data, redraw) => layerHead(box, data, "encoder", redraw, "hd");

View.panels.qkv = function (body, data) {
  const { layer, head } = View.state.encoder;
  const a = data.encoder[layer].self;
  const rows = data.source.pieces;
  body.append(View.el("p", "hint", `Layer ${layer + 1}, head ${head + 1}: d_k = ` +
                      `${data.model.d_head}; rows are the ${rows.length} source tokens.`));
  const row = View.el("div", "row");
  body.append(row);
  for (const [name, m] of [["Q", a.q], ["K", a.k], ["V", a.v]]) {
    View.numbers(row, View.grid(m, head), { title: name, rows, colName: dimName, corner: "token" });
  }
};

View.panels.scores = function (body, data) {
  const { layer, head } = View.state.encoder;
  const a = data.encoder[layer].self;
  const rows = data.source.pieces;
  const row = View.el("div", "row");
  body.append(row);
  const opts = { rows, cols: rows };
  View.heatmap(row, View.grid(a.scores, head), { ...opts, title: "Q·Kᵀ" });
  View.heatmap(row, View.grid(a.scaled, head),
               { ...opts, title: `Q·Kᵀ / √d_k (√${data.model.d_head} = ` +
                 `${Math.sqrt(data.model.d_head).toFixed(3)})` });
  View.heatmap(row, View.grid(a.weights, head), { ...opts, title: "softmax: the weights A",
                                                  scale: "prob" });
  View.numbers(body, View.grid(a.heads, head), { title: "Weighted sum of the values: A·V",
                                                 rows, colName: dimName, corner: "query" });
};

View.panels.heads = function (body, data) {
  const { layer } = View.state.encoder;
  const a = data.encoder[layer].self;
  const rows = data.source.pieces;
  body.append(View.el("p", "hint", `Layer ${layer + 1}: ${data.model.n_heads} heads of ` +
                      `${data.model.d_head} columns make ${data.model.d_model}.`));
  View.heatmap(body, View.concat(a.heads), { title: "concat(head_1, …, head_h)", rows,
                                             split: a.heads.shape[2] });
  View.heatmap(body, View.grid(a.output), { title: "concat(…)·W_O: the attention's output",
                                             rows });
};

// The heads of an (H, T, Dh) matrix side by side: (T, H·Dh).
View.concat = function (m) {
  const [H, T, Dh] = m.shape;
  const v = View.values(m);
  return View.derived(T, H * Dh, (r, c) => v[Math.floor(c / Dh) * T * Dh + r * Dh + (c % Dh)]);
};
