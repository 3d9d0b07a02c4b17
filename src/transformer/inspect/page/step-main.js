// The step-through view, part 5: loading the data (inline in the offline file, or from the
// server's POST /step-through), the header, and moving between panels with the mouse or the
// keyboard.
"use strict";

(function () {
  const $ = (id) => document.getElementById(id);
  const panels = [...document.querySelectorAll(".panel")];
  let data = null;
  let current = 0;

  function say(text, isError = false) {
    $("status").textContent = text;
    $("status").classList.toggle("error", isError);
  }

  async function load() {
    const inline = $("step-data");
    if (inline) return JSON.parse(inline.textContent);
    const params = new URLSearchParams(window.location.search);
    const sentence = params.get("sentence");
    if (!sentence) throw new Error("No sentence: open this page from a translation's “Step through” link.");
    const request = { sentence };
    const beam = parseInt(params.get("beam_size"), 10);
    if (beam > 0) request.beam_size = beam;
    const headers = { "Content-Type": "application/json" };
    const key = sessionStorage.getItem("apiKey");
    if (key) headers.Authorization = "Bearer " + key;
    say("Running the sentence through the model…");
    const response = await fetch("/step-through", { method: "POST", headers,
                                                    body: JSON.stringify(request) });
    const answer = await response.json().catch(() => ({ message: response.statusText }));
    if (!response.ok) throw new Error(answer.message || "HTTP " + response.status);
    return answer.view;
  }

  function header() {
    const m = data.model;
    $("sentence").textContent = `${data.sentence} → ${data.translation || "(empty)"}`;
    const norm = m.norm_first ? "pre-norm" : "post-norm";
    $("facts").textContent = `d_model ${m.d_model}, ${m.n_heads} heads (d_k ${m.d_head}), ` +
      `d_ff ${m.d_ff}, ${m.n_encoder_layers} + ${m.n_decoder_layers} layers, ` +
      `${m.parameters.toLocaleString("en")} parameters, ${norm}, ${m.positional} positions; ` +
      `beam ${data.decode.beam_size}, α ${data.decode.length_penalty}. Every number below ` +
      "comes from this model's own forward pass.";
    if (data.truncated.length) {
      $("truncated").hidden = false;
      $("truncated").textContent = "To keep this file small, some matrices are cut: " +
        data.truncated.join("; ") + ". The scores, weights and probabilities are complete.";
    }
  }

  function nav() {
    const list = $("steps");
    panels.forEach((panel, i) => {
      const button = View.el("button", "", `${i + 1}. ${panel.dataset.title}`);
      button.type = "button";
      button.addEventListener("click", () => show(i));
      const item = View.el("li");
      item.append(button);
      list.append(item);
    });
  }

  // Draws panel i: its controls (from the shared state) and its body.
  function render(i) {
    const panel = panels[i];
    const controls = panel.querySelector(".controls");
    const body = panel.querySelector(".body");
    const redraw = () => {
      body.replaceChildren();
      View.pending = [];
      View.panels[panel.id](body, data);
      View.layout();
    };
    if (controls) {
      controls.replaceChildren();
      if (View.controls[panel.id]) View.controls[panel.id](controls, data, redraw);
    }
    redraw();
  }

  function show(i, focus = true) {
    current = Math.min(Math.max(i, 0), panels.length - 1);
    panels.forEach((panel, k) => { panel.hidden = k !== current; });
    document.querySelectorAll("#steps button").forEach((button, k) => {
      if (k === current) button.setAttribute("aria-current", "step");
      else button.removeAttribute("aria-current");
    });
    $("prev").disabled = current === 0;
    $("next").disabled = current === panels.length - 1;
    render(current);
    window.history.replaceState(null, "", `#${panels[current].id}`);
    if (focus) panels[current].querySelector("h2").focus();
  }

  function onKey(event) {
    if (!data || event.altKey || event.ctrlKey || event.metaKey) return;
    const tag = event.target.tagName;
    if (tag === "INPUT" || tag === "SELECT" || tag === "TEXTAREA") return;
    const arrows = tag !== "CANVAS";
    if ((arrows && event.key === "ArrowRight") || event.key === "n") show(current + 1);
    else if ((arrows && event.key === "ArrowLeft") || event.key === "p") show(current - 1);
    else if (/^[1-9]$/.test(event.key) && Number(event.key) <= panels.length) show(Number(event.key) - 1);
    else return;
    event.preventDefault();
  }

  document.addEventListener("DOMContentLoaded", async () => {
    try {
      data = await load();
    } catch (error) {
      $("sentence").textContent = "";
      say(error.message, true);
      return;
    }
    say("");
    header();
    nav();
    $("prev").addEventListener("click", () => show(current - 1));
    $("next").addEventListener("click", () => show(current + 1));
    document.addEventListener("keydown", onKey);
    // Redrawn when the width changes, not the height alone (a phone's address bar, a full-page
    // screenshot): a redraw makes the panel's canvases anew, and the one in focus would lose it.
    let pending = null, width = window.innerWidth;
    window.addEventListener("resize", () => {
      if (window.innerWidth === width) return;
      width = window.innerWidth;
      clearTimeout(pending);
      pending = setTimeout(() => render(current), 150);
    });
    const start = panels.findIndex((panel) => `#${panel.id}` === window.location.hash);
    show(start < 0 ? 0 : start, false);
  });
})();
