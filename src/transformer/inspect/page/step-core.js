// The step-through view, part 1: reading the data and the pieces every panel draws with
// (heatmaps with a colour legend, tables of numbers, selectors). Plain browser JavaScript that
// loads nothing from anywhere; the data is the JSON object of inspect/step_view.py.
"use strict";

const View = {};

// A matrix {shape, full, data}: data is base64 of little-endian float32, decoded once.
View.values = function (m) {
  if (!m._values) {
    const text = atob(m.data);
    const bytes = new Uint8Array(text.length);
    for (let i = 0; i < text.length; i++) bytes[i] = text.charCodeAt(i);
    m._values = new Float32Array(bytes.buffer);
  }
  return m._values;
};

// A 2-D view {rows, cols, full, get(r, c)} of a 2-D matrix, or of entry `first` of a 3-D one
// (a head of an (H, rows, cols) matrix).
View.grid = function (m, first = 0) {
  const v = View.values(m);
  const s = m.shape;
  const [rows, cols] = s.length === 3 ? [s[1], s[2]] : s;
  const offset = s.length === 3 ? first * rows * cols : 0;
  return { rows, cols, full: m.full[m.full.length - 1],
           get: (r, c) => v[offset + r * cols + c] };
};

// The same shape, each value from f(r, c).
View.derived = function (rows, cols, f, full = cols) {
  return { rows, cols, full, get: f };
};

View.el = function (tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
};

View.fmt = function (x, digits = 3) {
  if (x === -Infinity) return "−∞";
  if (x === Infinity) return "∞";
  if (Number.isNaN(x)) return "NaN";
  const a = Math.abs(x);
  if (a !== 0 && (a < 10 ** -digits || a >= 1e5)) return x.toExponential(2);
  return x.toFixed(digits);
};

// Colour scales: "prob" 0..1 white to dark blue; "signed" purple (negative), white (0),
// orange (positive), symmetric around 0; -inf is grey.
const SCALES = {
  prob: ["#ffffff", "#c6dbef", "#6baed6", "#2171b5", "#08306b"],
  signed: ["#542788", "#998ec3", "#f7f7f7", "#f1a340", "#b35806"],
};
const BLOCKED = "#c8ccd4";

function mix(stops, t) {
  const x = Math.min(Math.max(t, 0), 1) * (stops.length - 1);
  const i = Math.min(Math.floor(x), stops.length - 2);
  const f = x - i;
  const a = parseInt(stops[i].slice(1), 16), b = parseInt(stops[i + 1].slice(1), 16);
  const ch = (shift) => Math.round(((a >> shift) & 255) * (1 - f) + ((b >> shift) & 255) * f);
  return `rgb(${ch(16)}, ${ch(8)}, ${ch(0)})`;
}

// {colour(v), light(v): whether dark text reads on it, range: [lo, hi]} for a grid.
View.scale = function (kind, g) {
  if (kind === "prob") {
    return { kind, range: [0, 1], colour: (v) => (v === -Infinity ? BLOCKED : mix(SCALES.prob, v)),
             light: (v) => v < 0.55 || v === -Infinity };
  }
  let most = 0;
  for (let r = 0; r < g.rows; r++) {
    for (let c = 0; c < g.cols; c++) {
      const v = g.get(r, c);
      if (Number.isFinite(v)) most = Math.max(most, Math.abs(v));
    }
  }
  most = most || 1;
  const t = (v) => 0.5 + v / (2 * most);
  return { kind, range: [-most, most],
           colour: (v) => (v === -Infinity ? BLOCKED : mix(SCALES.signed, t(v))),
           light: (v) => v === -Infinity || Math.abs(v) < 0.6 * most };
};

// The legend under a heatmap: low end, the colour bar, high end, and −∞ when it occurs.
View.legend = function (scale, blocked) {
  const box = View.el("div", "legend");
  const bar = View.el("span", "bar");
  const stops = scale.kind === "prob" ? SCALES.prob : SCALES.signed;
  bar.style.background = `linear-gradient(to right, ${stops.join(", ")})`;
  bar.setAttribute("aria-hidden", "true");
  box.append(View.el("span", "", View.fmt(scale.range[0], 2)), bar,
             View.el("span", "", View.fmt(scale.range[1], 2)));
  if (scale.kind === "signed") box.append(View.el("span", "", "(white: 0)"));
  if (blocked) {
    const inf = View.el("span", "inf");
    inf.setAttribute("aria-hidden", "true");
    box.append(inf, View.el("span", "", "−∞ (masked)"));
  }
  return box;
};

// A heatmap drawn on a canvas that fits the panel's width (it scrolls inside its own box when
// even the smallest cells do not fit). Hover, or focus it and use the arrow keys, to read a
// cell. opts: title, rows / cols (labels), scale ("prob" | "signed"), mark (a row to outline),
// split (a line every n columns), numbers (write values in cells that are large enough).
View.heatmap = function (parent, g, opts) {
  const figure = View.el("figure");
  const caption = View.el("figcaption", "", opts.title);
  const box = View.el("div", "scroll");
  const canvas = View.el("canvas", "heat");
  const readout = View.el("output", "readout");
  canvas.tabIndex = 0;
  canvas.setAttribute("role", "img");
  canvas.setAttribute("aria-label", `${opts.title}: ${g.rows} rows by ${g.cols} columns; ` +
                      "use the arrow keys to read the cells");
  box.append(canvas);
  figure.append(caption, box, readout);
  parent.append(figure);
  const scale = View.scale(opts.scale || "signed", g);
  let blocked = false;
  for (let r = 0; r < g.rows && !blocked; r++) {
    for (let c = 0; c < g.cols; c++) if (g.get(r, c) === -Infinity) { blocked = true; break; }
  }
  figure.append(View.legend(scale, blocked));

  const rowLabels = opts.rows || [];
  const colLabels = opts.cols || [];
  const ctx = canvas.getContext("2d");
  ctx.font = "11px system-ui, sans-serif";
  const labelWidth = rowLabels.length
    ? Math.min(110, 8 + Math.max(...rowLabels.map((s) => ctx.measureText(s).width))) : 0;
  const showCols = colLabels.length && colLabels.length <= 48;
  const labelHeight = showCols
    ? Math.min(90, 8 + Math.max(...colLabels.map((s) => ctx.measureText(s).width))) : 0;
  // Sized once the panel is laid out (View.layout): a figure's width is known only then.
  canvas.width = 0;
  canvas.height = 0;
  let cw = 1, ch = 1, width = 0, height = 0;
  const dpr = window.devicePixelRatio || 1;
  let cursor = { r: opts.mark ?? 0, c: 0 };

  function size() {
    const avail = Math.max(box.clientWidth, 160) - labelWidth - 4;
    cw = Math.max(1, Math.min(opts.maxCell || 34, Math.floor(avail / g.cols)));
    ch = Math.max(cw, rowLabels.length ? 14 : 4);
    width = labelWidth + cw * g.cols + 2;
    height = labelHeight + ch * g.rows + 2;
    canvas.width = Math.ceil(width * dpr);
    canvas.height = Math.ceil(height * dpr);
    canvas.style.width = `${width}px`;
    canvas.style.height = `${height}px`;
    draw();
  }

  function draw() {
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.clearRect(0, 0, width, height);
    ctx.font = "11px system-ui, sans-serif";
    ctx.textBaseline = "middle";
    ctx.fillStyle = "#1d2330";
    ctx.textAlign = "right";
    rowLabels.forEach((s, r) => ctx.fillText(s, labelWidth - 5, labelHeight + r * ch + ch / 2));
    if (showCols) {
      ctx.save();
      ctx.textAlign = "left";
      colLabels.forEach((s, c) => {
        ctx.save();
        ctx.translate(labelWidth + c * cw + cw / 2, labelHeight - 4);
        ctx.rotate(-Math.PI / 2);
        ctx.fillText(s, 0, 0);
        ctx.restore();
      });
      ctx.restore();
    }
    const numbers = opts.numbers !== false && cw >= 30 && ch >= 16;
    ctx.textAlign = "center";
    ctx.font = "10px system-ui, sans-serif";
    for (let r = 0; r < g.rows; r++) {
      for (let c = 0; c < g.cols; c++) {
        const v = g.get(r, c);
        const x = labelWidth + c * cw, y = labelHeight + r * ch;
        ctx.fillStyle = scale.colour(v);
        ctx.fillRect(x, y, cw, ch);
        if (numbers) {
          ctx.fillStyle = scale.light(v) ? "#1d2330" : "#ffffff";
          ctx.fillText(v === -Infinity ? "−∞" : v.toFixed(Math.abs(v) >= 10 ? 1 : 2),
                       x + cw / 2, y + ch / 2);
        }
      }
    }
    ctx.strokeStyle = "#1d2330";
    if (opts.split) {
      for (let c = opts.split; c < g.cols; c += opts.split) {
        ctx.beginPath();
        ctx.moveTo(labelWidth + c * cw, labelHeight);
        ctx.lineTo(labelWidth + c * cw, labelHeight + g.rows * ch);
        ctx.stroke();
      }
    }
    if (opts.mark !== undefined && opts.mark !== null) {
      ctx.lineWidth = 2;
      ctx.strokeRect(labelWidth + 1, labelHeight + opts.mark * ch + 1, cw * g.cols - 2, ch - 2);
    }
    if (document.activeElement === canvas) {
      ctx.lineWidth = 2;
      ctx.strokeStyle = "#f0a500";
      ctx.strokeRect(labelWidth + cursor.c * cw, labelHeight + cursor.r * ch, cw, ch);
    }
    ctx.lineWidth = 1;
  }

  function read(r, c) {
    const row = rowLabels[r] ?? `row ${r}`;
    const col = colLabels[c] ?? `column ${c}`;
    readout.textContent = `${opts.title}: ${row} · ${col} = ${View.fmt(g.get(r, c), 4)}`;
  }

  canvas.addEventListener("mousemove", (event) => {
    const rect = canvas.getBoundingClientRect();
    const c = Math.floor((event.clientX - rect.left - labelWidth) / cw);
    const r = Math.floor((event.clientY - rect.top - labelHeight) / ch);
    if (r >= 0 && r < g.rows && c >= 0 && c < g.cols) read(r, c);
  });
  canvas.addEventListener("focus", () => { draw(); read(cursor.r, cursor.c); });
  canvas.addEventListener("blur", draw);
  canvas.addEventListener("keydown", (event) => {
    const moves = { ArrowUp: [-1, 0], ArrowDown: [1, 0], ArrowLeft: [0, -1], ArrowRight: [0, 1],
                    Home: [0, -g.cols], End: [0, g.cols] };
    const move = moves[event.key];
    if (!move) return;
    event.preventDefault();
    event.stopPropagation();
    cursor = { r: Math.min(Math.max(cursor.r + move[0], 0), g.rows - 1),
               c: Math.min(Math.max(cursor.c + move[1], 0), g.cols - 1) };
    draw();
    read(cursor.r, cursor.c);
  });
  View.pending.push(size);
  return figure;
};

// Sizes and draws the heatmaps made since the last call, once their panel is laid out.
View.pending = [];
View.layout = function () {
  const sizes = View.pending;
  View.pending = [];
  sizes.forEach((size) => size());
};

// A small table of numbers: the first `show` columns, "…", and a button that shows every
// column embedded (noting when the model's matrix is wider still).
View.numbers = function (parent, g, opts) {
  const box = View.el("div", "scroll");
  const figure = View.el("figure");
  const show = opts.show || 6;
  let all = false;
  const button = View.el("button", "", "");
  button.type = "button";
  function fill() {
    const cols = all ? g.cols : Math.min(show, g.cols);
    const table = View.el("table", "numbers");
    const cap = View.el("caption", "", opts.title +
      (g.full > g.cols ? ` (first ${g.cols} of ${g.full} columns embedded)` : ""));
    const head = View.el("tr");
    head.append(View.el("th", "", opts.corner || ""));
    for (let c = 0; c < cols; c++) head.append(View.el("th", "", opts.colName ? opts.colName(c) : String(c)));
    if (cols < g.cols) head.append(View.el("th", "", "…"));
    table.append(cap, head);
    for (let r = 0; r < g.rows; r++) {
      const tr = View.el("tr");
      const th = View.el("th", "", (opts.rows || [])[r] ?? String(r));
      th.scope = "row";
      tr.append(th);
      for (let c = 0; c < cols; c++) tr.append(View.el("td", "", View.fmt(g.get(r, c), opts.digits ?? 3)));
      if (cols < g.cols) tr.append(View.el("td", "", "…"));
      table.append(tr);
    }
    box.replaceChildren(table);
    button.textContent = all ? `Show ${Math.min(show, g.cols)} columns` : `Show all ${g.cols} columns`;
    button.hidden = g.cols <= show;
    button.setAttribute("aria-expanded", String(all));
  }
  button.addEventListener("click", () => { all = !all; fill(); });
  fill();
  figure.append(box, button);
  parent.append(figure);
  return figure;
};

// A labelled <select> of n entries; calls onChange(index) when it changes.
View.select = function (parent, id, label, names, value, onChange) {
  const lab = View.el("label", "", label);
  lab.htmlFor = id;
  const select = View.el("select");
  select.id = id;
  names.forEach((name, i) => select.append(new Option(name, String(i))));
  select.value = String(value);
  select.addEventListener("change", () => onChange(parseInt(select.value, 10)));
  parent.append(lab, select);
  return select;
};

// A labelled range slider 0..max; onInput(value) as it moves.
View.slider = function (parent, id, label, max, value, onInput) {
  const lab = View.el("label", "", label);
  lab.htmlFor = id;
  const input = View.el("input");
  input.type = "range";
  input.id = id;
  input.min = "0";
  input.max = String(max);
  input.value = String(value);
  input.addEventListener("input", () => onInput(parseInt(input.value, 10)));
  parent.append(lab, input);
  return input;
};

View.tokens = function (parent, pieces, ids) {
  const list = View.el("ol", "tokens");
  pieces.forEach((piece, i) => {
    const item = View.el("li", "", piece);
    item.append(View.el("span", "id", ids ? `id ${ids[i]}` : `pos ${i}`));
    list.append(item);
  });
  parent.append(list);
  return list;
};
