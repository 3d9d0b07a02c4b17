// The step-through view, part 3: add & norm with the feed-forward network (panel 6), the
// decoder at one output step (panel 7) and the final linear layer and softmax (panel 8).
"use strict";

const SUBLAYERS = { encoder: ["self-attention", "the feed-forward network"],
                    decoder: ["masked self-attention", "encoder-decoder attention",
                              "the feed-forward network"] };

View.controls.norm = function (box, data, redraw) {
  const st = View.state.norm;
  let layerSelect = null;
  View.select(box, "norm-stack", "Stack", ["encoder", "decoder"], st.stack, (i) => {
    st.stack = i;
    st.layer = Math.min(st.layer, (i === 0 ? data.encoder : data.decoder).length - 1);
    layerSelect.value = String(st.layer);
    redraw();
  });
  const most = Math.max(data.encoder.length, data.decoder.length);
  layerSelect = View.select(box, "norm-layer", "Layer",
                            Array.from({ length: most }, (_, i) => `layer ${i + 1}`), st.layer,
                            (i) => { st.layer = i; redraw(); });
};

function normBlock(body, norm, rows, title, inputName) {
  body.append(View.el("h3", "", title));
  const row = View.el("div", "row");
  body.append(row);
  View.heatmap(row, View.grid(norm.input), { title: inputName, rows });
  View.heatmap(row, View.grid(norm.normalized), { title: "ĥ = (h − μ) / √(σ² + ε)", rows });
  View.heatmap(row, View.grid(norm.output), { title: "y = γ ĥ + β", rows });
  statsTable(body, norm.stats, rows, ["h", "ĥ", "y"],
             "Per token, over all d_model columns: ĥ has mean 0 and standard deviation 1");
}

function feedForwardBlock(body, layer, rows, data) {
  body.append(View.el("h3", "", "Feed-forward network"));
  const hidden = View.grid(layer.hidden);
  const act = { relu: "ReLU", gelu: "GELU", silu: "SiLU" }[data.model.activation || "relu"] ||
              data.model.activation;
  View.heatmap(body, hidden, { title: `activations: ${act}(x·W₁ + b₁), ${data.model.d_ff} units`,
                               rows });
  const list = View.el("ul", "bars");
  layer.active.forEach((n, t) => {
    const item = View.el("li");
    const bar = View.el("span", "bar");
    bar.style.width = `${(100 * n) / data.model.d_ff}%`;
    const wrap = View.el("span");
    wrap.append(bar);
    item.append(View.el("span", "piece", rows[t]), wrap,
                View.el("span", "p", `${n} / ${data.model.d_ff}`));
    list.append(item);
  });
  body.append(View.el("p", "hint", `Units active (above 0) after ${act}, per token:`), list);
  View.heatmap(body, View.grid(layer.ffn), { title: "FFN(x) = activations·W₂ + b₂", rows });
}

View.panels.norm = function (body, data) {
  const { stack, layer: chosen } = View.state.norm;
  const name = stack === 0 ? "encoder" : "decoder";
  const layers = stackOf(data, stack);
  const layer = layers[Math.min(chosen, layers.length - 1)];
  const rows = stack === 0 ? data.source.pieces : data.target.pieces;
  const pre = data.model.norm_first;
  const panel = body.closest(".panel");
  panel.querySelector(".norm-order").textContent = pre
    ? "This model is pre-norm: x + Sublayer(LayerNorm(x)), with one more LayerNorm after the " +
      "stack. Shown: h, the norm's input; ĥ, before γ and β, whose mean is 0 and standard " +
      "deviation 1 in every row; and y = γĥ + β, what the sublayer reads."
    : "This model is post-norm, as the paper: LayerNorm(x + Sublayer(x)). Shown: h, the " +
      "residual sum; ĥ, before γ and β, whose mean is 0 and standard deviation 1 in every " +
      "row; and y = γĥ + β, what the next sublayer reads (its mean and deviation are γ's " +
      "and β's doing).";
  SUBLAYERS[name].forEach((sublayer, i) => {
    const last = i === SUBLAYERS[name].length - 1;
    if (last && pre) {
      normBlock(body, layer.norms[i], rows, `LayerNorm before ${sublayer}`,
                "h: the residual stream");
      feedForwardBlock(body, layer, rows, data);
      return;
    }
    if (last) feedForwardBlock(body, layer, rows, data);
    normBlock(body, layer.norms[i], rows,
              pre ? `LayerNorm before ${sublayer}` : `Add & norm after ${sublayer}`,
              pre ? "h: the residual stream" : `h = x + ${sublayer}(x)`);
  });
  const final = data.final_norms[name];
  if (final && chosen === layers.length - 1) {
    normBlock(body, final, rows, `The final LayerNorm of the ${name}`, "h: the residual stream");
  }
};

View.controls.decoder = function (box, data, redraw) {
  layerHead(box, data, "decoder", redraw, "dec");
  View.stepSlider(box, data, redraw, "dec-step");
};

View.controls.output = function (box, data, redraw) {
  View.stepSlider(box, data, redraw, "out-step");
};

// The decoder step slider; every step slider on the page follows the same state.
View.stepSlider = function (box, data, redraw, id) {
  const T = data.target.pieces.length;
  const input = View.slider(box, id, "Step", T - 1, View.state.decoder.step, (t) => {
    View.state.decoder.step = t;
    label.textContent = `${t + 1} of ${T}`;
    redraw();
  });
  input.classList.add("step-slider");
  const label = View.el("span", "hint", `${View.state.decoder.step + 1} of ${T}`);
  box.append(label);
  box.sync = () => {
    input.value = String(View.state.decoder.step);
    label.textContent = `${View.state.decoder.step + 1} of ${T}`;
  };
};

function stepSentence(data, t) {
  const read = data.target.pieces.slice(0, t + 1).join(" ");
  return `Step ${t + 1}: the decoder has read “${read}” and chose “${produced(data)[t]}”.`;
}

View.panels.decoder = function (body, data) {
  const { layer, head, step } = View.state.decoder;
  const a = data.decoder[layer].self;
  const x = data.decoder[layer].cross;
  const rows = data.target.pieces;
  body.append(View.el("p", "sentence", stepSentence(data, step)));
  const scaled = View.grid(a.scaled, head);
  const mask = View.derived(scaled.rows, scaled.cols,
                            (r, c) => (scaled.get(r, c) === -Infinity ? -Infinity : 1));
  const row = View.el("div", "row");
  body.append(row);
  const opts = { rows, cols: rows, mark: step };
  View.heatmap(row, mask, { ...opts, title: "Look-ahead mask (1: may attend)", scale: "prob" });
  View.heatmap(row, scaled, { ...opts, title: "Masked Q·Kᵀ / √d_k" });
  View.heatmap(row, View.grid(a.weights, head), { ...opts, title: "softmax: masked self-attention",
                                                  scale: "prob" });
  const cross = View.grid(x.weights, head);
  View.heatmap(body, cross, { rows, cols: data.source.pieces, mark: step, scale: "prob",
                              title: "Encoder-decoder attention (queries: decoder, keys: source)" });
  body.append(View.el("p", "hint", `Row ${step + 1}: where step ${step + 1} looks in the source ` +
                      `(layer ${layer + 1}, head ${head + 1})`));
  const list = View.el("ul", "bars");
  data.source.pieces.forEach((piece, s) => {
    const w = cross.get(step, s);
    const item = View.el("li");
    const bar = View.el("span", "bar");
    bar.style.width = `${100 * w}%`;
    const wrap = View.el("span");
    wrap.append(bar);
    item.append(View.el("span", "piece", piece), wrap, View.el("span", "p", w.toFixed(3)));
    list.append(item);
  });
  body.append(list);
};

View.panels.output = function (body, data) {
  const { step } = View.state.decoder;
  const next = data.next[step];
  body.append(View.el("p", "sentence", stepSentence(data, step)));
  const list = View.el("ol", "bars");
  let total = 0;
  next.top.forEach(([id, piece, p]) => {
    total += p;
    const item = View.el("li");
    if (id === next.chosen[0]) item.classList.add("chosen");
    const bar = View.el("span", "bar");
    bar.style.width = `${100 * p}%`;
    const wrap = View.el("span");
    wrap.append(bar);
    item.append(View.el("span", "piece", id === next.chosen[0] ? `${piece} ✓` : piece), wrap,
                View.el("span", "p", p.toFixed(4)));
    item.title = `id ${id}`;
    list.append(item);
  });
  body.append(View.el("h3", "", `The ${next.top.length} most likely next tokens`), list);
  const [, piece, p, rank] = next.chosen;
  body.append(View.el("p", "", `These hold ${(100 * total).toFixed(1)}% of the probability ` +
    `over ${data.model.tgt_vocab_size} tokens. Chosen (✓): “${piece}”, p = ${p.toFixed(4)}, ` +
    `rank ${rank}.`));
};
