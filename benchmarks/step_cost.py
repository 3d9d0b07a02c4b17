"""What the loss and the optimizer cost in a training step: peak memory, operator calls, time.

    .venv/bin/python benchmarks/step_cost.py                     # small, V = 32k, 8k tokens
    .venv/bin/python benchmarks/step_cost.py --preset base --rounds 3
    python3 benchmarks/step_cost.py --device cuda --preset base  # on a GPU machine

Loss rows: one training step (forward, loss, backward, fused AdamW) with the loss made from the
whole logits (``runtime.loss_chunk 0``, how training ran before) and with the final linear layer
fused into the loss, ``--chunks`` target positions at a time. Optimizer rows: one AdamW update
of the same model as PyTorch's per-tensor loop (how training ran before), ``foreach`` and
``fused``. For each: the peak of the tensor memory the step allocates on top of the weights and
the optimizer state (torch.profiler's memory events on a CPU, ``max_memory_allocated`` on a
GPU), the operator calls per step (every ``aten::`` call the profiler records, nested ones
included) and the time: on a CPU the CPU seconds of ``--threads`` threads, so that other jobs on
a shared machine slow the variants less, best of ``--rounds`` with the variants interleaved.
Batches: ``--batch`` sentences of ``--length`` source and ``--length`` target tokens (8,192
tokens, as ``train.max_tokens`` counts them, by default). Writes ``results/step_cost_DEVICE.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile
from train_speed import batches

from transformer.config import ModelConfig, RuntimeConfig, TrainConfig
from transformer.model import Transformer
from transformer.training.chunked_loss import TrainingLoss
from transformer.training.optimizer import parameter_groups

RESULTS = Path(__file__).parent / "results"
ADAM = {
    "per-tensor loop": {"foreach": False},
    "foreach": {"foreach": True},
    "fused": {"fused": True},
}


def adamw(model: torch.nn.Module, kind: str) -> torch.optim.AdamW:
    t = TrainConfig()
    return torch.optim.AdamW(parameter_groups(model, 0.0), lr=1e-4, eps=t.adam_eps,
                             betas=(t.adam_beta1, t.adam_beta2), **ADAM[kind])  # fmt: skip


def profiled(device: torch.device, step) -> tuple[int, int, list]:
    """(peak bytes allocated by ``step()`` above what was alive before it, aten calls, the
    profiler's per-operator averages)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        before = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
    with profile(activities=[ProfilerActivity.CPU], profile_memory=device.type == "cpu") as prof:
        step()
    calls = sum(e.count for e in prof.key_averages() if e.key.startswith("aten::"))
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) - before, calls, prof.key_averages()
    with tempfile.TemporaryDirectory() as folder:
        trace = Path(folder) / "trace.json"
        prof.export_chrome_trace(str(trace))
        events = json.loads(trace.read_text())["traceEvents"]
    memory = [e["args"]["Total Allocated"] for e in events if e.get("name") == "[memory]"]
    return max(memory, default=0), calls, prof.key_averages()


def where_time_goes(name: str, averages: list, top: int) -> list[str]:
    """A table of the ``top`` aten operators by their own (self) CPU time in one profiled step."""
    aten = sorted((e for e in averages if e.key.startswith("aten::")),
                  key=lambda e: e.self_cpu_time_total, reverse=True)  # fmt: skip
    total = sum(e.self_cpu_time_total for e in aten)
    lines = [f"Where the CPU time of one step goes ({name}; self time, profiler on)", "",
             "| operator | calls | self CPU time | share |", "|---|---|---|---|"]  # fmt: skip
    for e in aten[:top]:
        own = e.self_cpu_time_total
        lines.append(f"| {e.key} | {e.count:,} | {own / 1000:,.1f} ms | {100 * own / total:.1f}% |")
    return lines


def timed(device: torch.device, steps: dict, rounds: int) -> dict[str, float]:
    """Best seconds per call of each step, the steps interleaved round by round."""
    clock = time.perf_counter if device.type == "cuda" else time.process_time
    best = dict.fromkeys(steps, float("inf"))
    for _ in range(rounds):
        for name, step in steps.items():
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            start = clock()
            step()
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            best[name] = min(best[name], clock() - start)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--preset", default="small")
    parser.add_argument("--vocab", type=int, default=32000)
    parser.add_argument("--batch", type=int, default=128, help="sentences per batch")
    parser.add_argument("--length", type=int, default=32, help="tokens per sentence (padded)")
    parser.add_argument("--chunks", default="256,1024,4096", help="loss_chunk values to measure")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--threads", type=int, default=1, help="CPU threads; 0: torch's default")
    parser.add_argument(
        "--top", type=int, default=8, help="operators in the where-time-goes tables"
    )
    parser.add_argument("--report", type=Path, default=None,
                        help="the tables' file (default: results/step_cost_DEVICE.md)")  # fmt: skip
    args = parser.parse_args()
    device = torch.device(args.device)
    if args.threads:
        torch.set_num_threads(args.threads)
    config = ModelConfig.preset(args.preset, src_vocab_size=args.vocab, tgt_vocab_size=args.vocab,
                                share_embeddings=True)  # fmt: skip
    data = batches(config, args.batch, args.length, 2, device)
    torch.manual_seed(0)
    model = Transformer(config).to(device).train()
    state_bytes = 3 * sum(p.numel() * p.element_size() for p in model.parameters())  # w, m, v
    optimizers = {kind: adamw(model, kind) for kind in ADAM}

    def training_step(chunk: int, kind: str):
        loss = TrainingLoss(model, 0.1, chunk)

        def step() -> None:
            src, tgt_in, tgt_out = data[0]
            optimizers[kind].zero_grad(set_to_none=True)
            sums = loss(src, tgt_in, tgt_out)
            (sums.loss / sums.n_tokens).backward()
            optimizers[kind].step()

        return step

    steps = {"before: whole logits (loss_chunk 0), per-tensor AdamW": (0, "per-tensor loop"),
             "whole logits (loss_chunk 0), fused AdamW": (0, "fused")}  # fmt: skip
    for chunk in args.chunks.split(","):
        steps[f"fused loss, loss_chunk {int(chunk)}, fused AdamW"] = (int(chunk), "fused")
    loss_steps = {name: training_step(*setting) for name, setting in steps.items()}
    for kind in ADAM:  # every optimizer's state exists before anything is measured
        training_step(1024, kind)()

    def without_gradients(step):  # the step's own gradients count in its peak
        model.zero_grad(set_to_none=True)
        return profiled(device, step)

    loss_rows = {name: without_gradients(step) for name, step in loss_steps.items()}
    loss_times = timed(device, loss_steps, args.rounds)

    for optimizer in optimizers.values():  # gradients for the optimizer-only rows
        optimizer.zero_grad(set_to_none=False)
    training_step(1024, "fused")()
    updates = {kind: optimizer.step for kind, optimizer in optimizers.items()}
    adam_rows = {kind: profiled(device, update) for kind, update in updates.items()}
    adam_times = timed(device, updates, 5 * args.rounds)

    threads = torch.get_num_threads()
    load = os.getloadavg()
    lines = [
        f"`{args.preset}` preset, vocabulary {args.vocab:,} (shared, tied), batches of "
        f"{args.batch} x {args.length} source + target tokens "
        f"({2 * args.batch * args.length:,} tokens); "
        f"{'GPU ' + torch.cuda.get_device_name(device) if device.type == 'cuda' else 'CPU'}, "
        f"{threads} thread(s), torch {torch.__version__}; load average {load[0]:.1f} while it "
        f"ran; times: best of {args.rounds} round(s); weights + Adam state "
        f"{state_bytes / 1e6:,.0f} MB",
        "",
        "| training step | peak step memory | aten calls per step | step time |",
        "|---|---|---|---|",
    ]
    for name, (memory, calls, _) in loss_rows.items():
        lines.append(f"| {name} | {memory / 1e6:,.0f} MB | {calls:,} | "
                     f"{1000 * loss_times[name]:,.0f} ms |")  # fmt: skip
    lines += ["", "| AdamW | aten calls per update | update time |", "|---|---|---|"]
    for kind, (_, calls, _) in adam_rows.items():
        lines.append(f"| {kind} | {calls:,} | {1000 * adam_times[kind]:.1f} ms |")
    for name, (_, _, averages) in loss_rows.items():
        if name.startswith(("before", f"fused loss, loss_chunk {RuntimeConfig().loss_chunk},")):
            lines += ["", *where_time_goes(name, averages, args.top)]
    text = "\n".join(lines) + "\n"
    print(text)
    report = args.report or RESULTS / f"step_cost_{device.type}.md"
    report.parent.mkdir(parents=True, exist_ok=True)
    report.write_text(text)


if __name__ == "__main__":
    main()
