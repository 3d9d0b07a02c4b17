// The page of `transformer serve`: translate what is typed, and draw the encoder-decoder
// attention of a chosen translation as a table (rows: tokens produced, columns: source tokens);
// each translation links to its step-through view (/step-through).
// Plain browser JavaScript, served by the app itself; it talks only to this server.
"use strict";

const $ = (id) => document.getElementById(id);
let attention = null; // the last /attention answer

function headers() {
  const h = { "Content-Type": "application/json" };
  const key = sessionStorage.getItem("apiKey");
  if (key) h.Authorization = "Bearer " + key;
  return h;
}

function say(text, isError = false) {
  $("status").textContent = text;
  $("status").classList.toggle("error", isError);
}

// A request to the API; on 401 the key field appears and the error says why.
async function call(method, path, body) {
  const response = await fetch(path, {
    method, headers: headers(), body: body ? JSON.stringify(body) : undefined,
  });
  const data = await response.json().catch(() => ({ message: response.statusText }));
  if (response.status === 401) {
    $("key-row").hidden = false;
    $("key").focus();
  }
  if (!response.ok) throw new Error(data.message || "HTTP " + response.status);
  return data;
}

async function showModel() {
  try {
    const info = await call("GET", "/info");
    $("model").textContent = `${info.source_language} → ${info.target_language}, ` +
      `${info.parameters.toLocaleString()} parameters, ${info.engine} on ${info.device}`;
    $("beam_size").max = info.limits.max_beam;
    $("beam_size").value = Math.min(info.decode.beam_size, info.limits.max_beam);
  } catch (error) {
    say(error.message, true);
  }
}

async function translate(event) {
  event.preventDefault();
  const key = $("key").value.trim();
  if (key) sessionStorage.setItem("apiKey", key);
  // The non-empty lines, and the line number (from 1) each came from, for error messages.
  const lines = $("source").value.split("\n").map((s) => s.trim());
  const lineOf = lines.flatMap((s, i) => (s ? [i + 1] : []));
  const sentences = lines.filter((s) => s);
  if (!sentences.length) {
    say("Type a sentence first.", true);
    $("source").focus();
    return;
  }
  const beam = parseInt($("beam_size").value, 10) || 1;
  const prefix = $("prefix").value.trim();
  const request = { sentences, beam_size: beam };
  if (prefix) request.prefix = sentences.map(() => prefix); // the same start for each sentence
  $("translate").disabled = true;
  say("Translating…");
  try {
    const answer = await call("POST", "/translate", request);
    showTranslations(sentences, answer, beam, prefix);
    say(`${sentences.length} translated in ${answer.time_ms.toFixed(0)} ms.`);
  } catch (error) {
    // The API names a sentence by its place among those sent ("sentences.2: ..."); the person
    // typed lines, some of them empty: name the line instead.
    say(error.message.replace(/^sentences\.(\d+)/, (_, i) => `line ${lineOf[Number(i)]}`), true);
  } finally {
    $("translate").disabled = false;
  }
}

function showTranslations(sentences, answer, beam, prefix) {
  const list = $("results");
  list.replaceChildren();
  answer.translations.forEach((t, i) => {
    const button = document.createElement("button");
    button.type = "button";
    button.className = "translation";
    button.setAttribute("aria-pressed", "false");
    const source = document.createElement("span");
    source.className = "source";
    source.textContent = sentences[i];
    const text = document.createElement("span");
    text.className = "text";
    text.textContent = t.text || "(empty)";
    const score = document.createElement("span");
    score.className = "score";
    score.textContent = t.score === null ? "" : `score ${t.score.toFixed(3)}`;
    button.append(source, text, score);
    button.addEventListener("click", () => showAttention(button, sentences[i], beam, prefix));
    // The same sentence through the model, step by step, on a page of its own.
    const step = document.createElement("a");
    step.className = "step-link";
    step.href = "/step-through?" + new URLSearchParams({ sentence: sentences[i], beam_size: beam });
    step.textContent = "Step through";
    step.setAttribute("aria-label", `Step through: ${sentences[i]}`);
    const item = document.createElement("li");
    item.append(button, step);
    list.append(item);
  });
}

async function showAttention(button, sentence, beam, prefix) {
  document.querySelectorAll(".translation").forEach((b) => b.setAttribute("aria-pressed", "false"));
  button.setAttribute("aria-pressed", "true");
  say("Computing the attention…");
  try {
    const request = prefix ? { sentence, beam_size: beam, prefix } : { sentence, beam_size: beam };
    attention = await call("POST", "/attention", request);
  } catch (error) {
    say(error.message, true);
    return;
  }
  fillSelect($("layer"), attention.cross_attention.length, "layer", attention.cross_attention.length - 1);
  fillSelect($("head"), attention.cross_attention[0].length, "head", -1, "mean of the heads");
  $("attention-sentence").textContent = `${sentence} → ${attention.translation}`;
  $("attention").hidden = false;
  drawHeatmap();
  say("Attention shown below.");
  $("attention-title").focus();
}

function fillSelect(select, n, word, chosen, meanLabel) {
  select.replaceChildren();
  if (meanLabel) select.append(new Option(meanLabel, "-1"));
  for (let i = 0; i < n; i++) select.append(new Option(`${word} ${i + 1}`, String(i)));
  select.value = String(chosen);
}

// The chosen layer's weights, one head or the mean of all heads: rows x columns.
function weights() {
  const layer = attention.cross_attention[parseInt($("layer").value, 10)];
  const head = parseInt($("head").value, 10);
  if (head >= 0) return layer[head];
  return layer[0].map((row, r) => row.map((_, c) =>
    layer.reduce((sum, h) => sum + h[r][c], 0) / layer.length));
}

function drawHeatmap() {
  const table = $("heatmap");
  table.replaceChildren();
  // Row t reads target_tokens[t] and chooses the next token: label it with what it produced.
  const produced = [...attention.target_tokens.slice(1), "</s>"];
  const caption = document.createElement("caption");
  caption.textContent = "Attention from each produced token (rows) to each source token (columns)";
  const head = document.createElement("tr");
  head.append(document.createElement("td"));
  for (const token of attention.source_tokens) {
    const th = document.createElement("th");
    th.scope = "col";
    th.textContent = token;
    head.append(th);
  }
  const thead = document.createElement("thead");
  thead.append(head);
  const tbody = document.createElement("tbody");
  weights().forEach((row, r) => {
    const tr = document.createElement("tr");
    const th = document.createElement("th");
    th.scope = "row";
    th.textContent = produced[r];
    tr.append(th);
    row.forEach((w, c) => {
      const td = document.createElement("td");
      const percent = Math.round(w * 100);
      td.style.setProperty("--w", w.toFixed(3));
      td.title = `${produced[r]} → ${attention.source_tokens[c]}: ${percent}%`;
      td.textContent = String(percent);
      td.classList.toggle("strong", w > 0.5);
      tr.append(td);
    });
    tbody.append(tr);
  });
  table.append(caption, thead, tbody);
}

document.addEventListener("DOMContentLoaded", () => {
  $("form").addEventListener("submit", translate);
  $("source").addEventListener("keydown", (event) => {
    if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) $("form").requestSubmit();
  });
  $("layer").addEventListener("change", drawHeatmap);
  $("head").addEventListener("change", drawHeatmap);
  showModel();
});
