"""Where one training step's time goes: torch.profiler over the training loop's own step.

    python3 benchmarks/profile_step.py --device cuda --preset base --batch 400 --precision bf16
    .venv/bin/python benchmarks/profile_step.py --preset small --batch 32 --threads 2

The step is the loop's (training/loop.py): the model and its loss as one ``TrainingLoss`` (the
final linear layer fused into the loss, ``runtime.loss_chunk``), autocast, the GradScaler,
``clip_gradients``, the divergence watch and the metrics' running sums, then the fused AdamW of
``make_optimizer``. ``--models`` can add the same model on ``nn.Transformer`` scoring its whole
logits (train_speed.py's reference). Batches as in train_speed.py: ``--batch`` sentences of
``--length`` source and ``--length`` target tokens, a tenth of them padding.

For each model: the wall-clock time per step without the profiler (best of ``--rounds``), then
one profiled stretch of ``--steps`` steps: operator calls and, on a GPU, kernel launches per
step and the GPU's busy time (the sum of its kernels' times). Wall time minus busy time is the
time the GPU waited for the host: the host overhead. The tables list the operators with the
most self time on the device and on the host. Writes ``--report`` (default
results/profile_step_DEVICE.md) and, with ``--trace``, a Chrome trace per model.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch
from machine import cpu_name
from torch.profiler import ProfilerActivity, profile
from train_speed import LoopStep, batches, forward_flops, matmul_peak

from transformer.config import ModelConfig, RuntimeConfig
from transformer.device import DTYPES

RESULTS = Path(__file__).parent / "results"


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def wall_time(step: LoopStep, data: list, steps: int, rounds: int) -> float:
    """Seconds per step, the best of ``rounds`` stretches of ``steps`` steps."""
    best = float("inf")
    for _ in range(rounds):
        _sync(step.device)
        start = time.perf_counter()
        for i in range(steps):
            step(data[i % len(data)], i + 1)
        _sync(step.device)
        best = min(best, (time.perf_counter() - start) / steps)
    return best


def profiled(step: LoopStep, data: list, steps: int, trace: Path | None) -> dict:
    """Operator calls, kernels and busy device time per step, and the top operators."""
    gpu = step.device.type == "cuda"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if gpu else [])
    _sync(step.device)
    with profile(activities=activities) as prof:
        for i in range(steps):
            step(data[i % len(data)], i + 1)
        _sync(step.device)
    if trace is not None:
        prof.export_chrome_trace(str(trace))
    events = prof.events()
    aten_calls = sum(1 for e in events if e.name.startswith("aten::"))
    kernels = [e for e in events if e.device_type == torch.autograd.DeviceType.CUDA]
    busy_us = sum(e.device_time for e in kernels) if gpu else 0.0
    averages = prof.key_averages()
    by_host = sorted(averages, key=lambda e: -e.self_cpu_time_total)[:15]

    def per_step(events, time) -> list[tuple[str, float, float]]:
        return [(e.key, time(e) / 1000 / steps, e.count / steps) for e in events]

    def device_time(e) -> float:
        return e.self_device_time_total

    result = {
        "aten_calls": aten_calls / steps,
        "kernels": len(kernels) / steps,
        "busy_ms": busy_us / 1000 / steps,
        "by_host": per_step(by_host, lambda e: e.self_cpu_time_total),
    }
    if gpu:
        host_side = [e for e in averages if e.device_type == torch.autograd.DeviceType.CPU]
        kernel_side = [e for e in averages if e.device_type != torch.autograd.DeviceType.CPU]
        result["by_launcher"] = per_step(_largest(host_side, busy_us), device_time)
        result["by_kernel"] = per_step(_largest(kernel_side, busy_us), device_time)
    return result


def _largest(events, busy_us: float, share: float = 0.01, most: int = 40) -> list:
    """The events with at least ``share`` of the busy device time (at most ``most``), largest
    first. Given only host-side operators or only kernels, each kernel's time counts once:
    host-side, on the operator that launched it."""
    rows = [e for e in events if e.self_device_time_total >= max(share * busy_us, 1e-9)]
    return sorted(rows, key=lambda e: -e.self_device_time_total)[:most]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--preset", default="small")
    parser.add_argument("--models", default="ours", help="ours and/or nn.Transformer")
    parser.add_argument("--vocab", type=int, default=32000)
    parser.add_argument("--batch", type=int, default=64, help="sentences per batch")
    parser.add_argument("--length", type=int, default=64, help="tokens per sentence (padded)")
    parser.add_argument("--precision", default="fp32", choices=list(DTYPES))
    parser.add_argument("--loss-chunk", type=int, default=RuntimeConfig().loss_chunk)
    parser.add_argument("--compile", action="store_true", help="torch.compile the forward pass")
    parser.add_argument("--steps", type=int, default=None, help="steps per timed stretch")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=0)
    parser.add_argument("--trace", type=Path, default=None, help="folder for Chrome traces")
    parser.add_argument("--report", type=Path, default=None)
    args = parser.parse_args()
    device = torch.device(args.device)
    gpu = device.type == "cuda"
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.backends.cuda.matmul.allow_tf32 = False
    config = ModelConfig.preset(args.preset, src_vocab_size=args.vocab, tgt_vocab_size=args.vocab,
                                share_embeddings=True)  # fmt: skip
    data = batches(config, args.batch, args.length, 4, device)
    steps = args.steps or (20 if gpu else 3)
    flops = 3 * forward_flops(config, args.batch, args.length, args.length)
    peak = matmul_peak(device, DTYPES[args.precision])
    tokens = args.batch * 2 * args.length
    lines = [
        f"Device: {torch.cuda.get_device_name(device) if gpu else cpu_name()} "
        f"({torch.get_num_threads()} threads), torch {torch.__version__}; preset {args.preset}, "
        f"vocabulary {args.vocab:,} shared; batches of {args.batch} x {args.length} source + "
        f"target tokens ({tokens:,}); {args.precision}; ours with loss_chunk {args.loss_chunk}; "
        f"compile {'yes' if args.compile else 'no'}; {args.precision} matmul peak "
        f"{peak / 1e12:.1f} TFLOP/s.",
        "",
        "| model | ms/step | tokens/s | MFU | aten calls/step | kernels/step | GPU busy "
        "ms/step | host overhead (wall − busy) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    details = []
    for name in args.models.split(","):
        step = LoopStep(name, config, device, args.precision, args.loss_chunk, args.compile)
        for i in range(3 if gpu else 1):  # warm-up: allocator, cuBLAS handles, compilation
            step(data[i % len(data)], i + 1)
        seconds = wall_time(step, data, steps, args.rounds)
        trace = args.trace / f"trace_{name}_{args.precision}.json" if args.trace else None
        if trace is not None:
            trace.parent.mkdir(parents=True, exist_ok=True)
        p = profiled(step, data, steps, trace)
        ms = 1000 * seconds
        idle = ms - p["busy_ms"]
        overhead = f"{idle:.1f} ms ({100 * idle / ms:.0f}%)" if gpu else "–"
        lines.append(
            f"| {name} | {ms:.1f} | {tokens / seconds:,.0f} | {100 * flops / seconds / peak:.1f}% "
            f"| {p['aten_calls']:,.0f} | {p['kernels']:,.0f} | "
            f"{p['busy_ms']:.1f} | {overhead} |"
        )
        for title, key in (
            ("device time per step by the operator that launched it, each at least 1% of the "
             "busy time", "by_launcher"),
            ("device time per step by kernel, each at least 1% of the busy time", "by_kernel"),
            ("self host time per step, the 15 largest", "by_host"),
        ):  # fmt: skip
            if not p.get(key):
                continue
            listed = sum(t for _, t, _ in p[key])
            total = f" (these rows: {listed:.1f} ms)" if key != "by_host" else ""
            details += ["", f"{name}: {title}{total}", "",
                        "| operator | ms/step | calls/step |", "|---|---|---|"]  # fmt: skip
            details += [f"| `{k[:90]}` | {t:.2f} | {c:.0f} |" for k, t, c in p[key]]
        print(lines[-1], flush=True)
        del step
    text = "\n".join(lines + details) + "\n"
    print(text)
    report = args.report or RESULTS / f"profile_step_{device.type}.md"
    report.parent.mkdir(parents=True, exist_ok=True)
    report.write_text(text)


if __name__ == "__main__":
    main()
