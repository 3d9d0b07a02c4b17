"""Training speed, ours against a model built on ``torch.nn.Transformer``, measured side by side.

    .venv/bin/python benchmarks/train_speed.py --no-compile        # CPU rows (this machine)
    python3 benchmarks/train_speed.py --device cuda --preset base  # GPU rows (a GPU machine)

Both models have the same sizes, the same shared and tied embeddings, the same sinusoidal
positions, the same label-smoothed loss and the same batches (random ids, a tenth of each
sentence padding), and both take the training loop's step (``LoopStep``, which profile_step.py
profiles): autocast, the GradScaler, the divergence watch, ``clip_gradients`` and the fused
AdamW of ``make_optimizer``. Ours computes its loss as the loop does, the final linear layer
fused into it (``--loss-chunk``; 0 for the whole logits); the reference scores its whole logits
with loss.py. Each round times ``--steps`` steps of each model in each precision in turn,
after a warm-up; the best of ``--rounds`` counts, so that a machine busy with other work slows
them alike. Rows: fp32 (TF32 off) and bf16 autocast on a GPU or a CPU with native bf16
(``device.native_bf16_cpu``); each eager and with ``torch.compile``. For each it reports tokens/s
(source + target, padding included), ms per step, peak step memory (on a GPU; on a CPU see
step_cost.py), the model's FLOP/s (3 × the forward matmul FLOPs: forward + backward) and MFU
against the peak of a large matmul measured in the same run, in the same precision. Writes
``results/train_speed_DEVICE.md``.
"""

from __future__ import annotations

import argparse
import math
import os
import time
from pathlib import Path

import torch
from machine import cpu_name
from torch import Tensor, nn

from transformer.config import ModelConfig, RuntimeConfig, TrainConfig
from transformer.device import DTYPES, autocast, grad_scaler, native_bf16_cpu
from transformer.model import Transformer, products, sinusoidal_table
from transformer.training.chunked_loss import TrainingLoss
from transformer.training.divergence import Divergence
from transformer.training.loss import label_smoothed_nll
from transformer.training.metrics import Meter
from transformer.training.optimizer import clip_gradients, make_optimizer
from transformer.vocab import PAD_ID

RESULTS = Path(__file__).parent / "results"


class TorchTransformer(nn.Module):
    """The same model on ``nn.Transformer``: shared, tied, scaled embeddings and sinusoids."""

    def __init__(self, c: ModelConfig) -> None:
        super().__init__()
        self.embed = nn.Embedding(c.src_vocab_size, c.d_model, padding_idx=PAD_ID)
        self.register_buffer("pe", sinusoidal_table(c.max_positions, c.d_model), persistent=False)
        self.scale = math.sqrt(c.d_model)
        self.core = nn.Transformer(
            c.d_model, c.n_heads, c.n_encoder_layers, c.n_decoder_layers, c.d_ff, c.dropout,
            batch_first=True, norm_first=c.norm_first,
        )  # fmt: skip
        self.dropout = nn.Dropout(c.dropout)

    def forward(self, src: Tensor, tgt: Tensor) -> Tensor:
        S, T = src.size(1), tgt.size(1)
        x = self.dropout(self.embed(src) * self.scale + self.pe[:S])  # (B, S, D)
        y = self.dropout(self.embed(tgt) * self.scale + self.pe[:T])  # (B, T, D)
        causal = nn.Transformer.generate_square_subsequent_mask(T, device=src.device)
        hidden = self.core(
            x, y, tgt_mask=causal, src_key_padding_mask=src == PAD_ID,
            tgt_key_padding_mask=tgt == PAD_ID, memory_key_padding_mask=src == PAD_ID,
            tgt_is_causal=True,
        )  # fmt: skip
        return hidden @ self.embed.weight.T  # (B, T, V) tied output


def forward_flops(c: ModelConfig, B: int, S: int, T: int) -> float:
    """Matmul FLOPs of one forward pass (2 per multiply-add), padding included."""
    d, f, V = c.d_model, c.d_ff, c.tgt_vocab_size
    encoder = c.n_encoder_layers * B * S * (2 * 4 * d * d + 2 * 2 * d * f + 2 * 2 * S * d)
    decoder = (
        c.n_decoder_layers
        * B
        * (
            T * (2 * 4 * d * d + 2 * 2 * T * d)  # masked self-attention (full T×T computed)
            + T * 2 * 2 * d * d
            + S * 2 * 2 * d * d
            + T * 2 * 2 * S * d  # encoder-decoder attention
            + T * 2 * 2 * d * f  # feed-forward
        )
    )
    return encoder + decoder + B * T * 2 * d * V  # + the output projection


def matmul_peak(device: torch.device, dtype: torch.dtype, clock=time.perf_counter) -> float:
    """FLOP/s of a large square matmul: the practical peak MFU is measured against (timed with
    the steps' ``clock``). On a CPU in float32, the faster of MKL's (``a @ b``) and oneDNN's
    (model/products.py: where it is the faster, the training products go through it)."""
    n = 8192 if device.type == "cuda" else 2048
    a, b = (torch.randn(n, n, device=device, dtype=dtype) for _ in range(2))
    multiplies = [lambda: a @ b]
    if device.type == "cpu" and dtype == torch.float and products.can_pack():
        multiplies.append(lambda: products.onednn_product(a, b, None))
    peaks = []
    for multiply in multiplies:
        for _ in range(3):
            multiply()
        _sync(device)
        repeats = 20 if device.type == "cuda" else 5
        start = clock()
        for _ in range(repeats):
            multiply()
        _sync(device)
        peaks.append(2 * n**3 * repeats / (clock() - start))
    return max(peaks)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def batches(c: ModelConfig, B: int, L: int, n: int, device: torch.device) -> list[tuple]:
    """n batches of B sentences padded to L (source and target), a tenth of each padding."""
    out = []
    generator = torch.Generator().manual_seed(0)
    for _ in range(n):
        src = torch.randint(4, c.src_vocab_size, (B, L), generator=generator)
        tgt = torch.randint(4, c.tgt_vocab_size, (B, L + 1), generator=generator)
        lengths = torch.randint(int(0.8 * L), L + 1, (B,), generator=generator)
        keep = torch.arange(L)[None] < lengths[:, None]
        src[~keep] = PAD_ID
        tgt[:, 1:][~keep] = PAD_ID
        out.append(tuple(t.to(device) for t in (src, tgt[:, :-1], tgt[:, 1:])))
    return out


class LoopStep:
    """One training step as training/loop.py takes it, for ``ours`` (its model built with seed
    0); the reference gets the same optimizer, clipping and precision around its own forward
    pass and loss. ``step(batch, n)``: ``n`` counts steps for the divergence watch."""

    def __init__(self, name: str, config: ModelConfig, device: torch.device, precision: str,
                 loss_chunk: int, compiled: bool) -> None:  # fmt: skip
        torch.manual_seed(0)
        self.name, self.device, self.precision = name, device, precision
        self.train = TrainConfig()
        if name == "ours":
            self.model = Transformer(config).to(device)
            self.forward = TrainingLoss(self.model, 0.1, loss_chunk, compile=compiled)
        else:
            self.model = TorchTransformer(config).to(device)
            reference = _LogitsLoss(self.model)
            self.forward = torch.compile(reference, dynamic=True) if compiled else reference
        self.optimizer = make_optimizer(self.model, self.train)
        for group in self.optimizer.param_groups:
            group["lr"] = 1e-4
        self.scaler = grad_scaler(device, precision)
        self.watch = Divergence(device, check_grad_norm=not self.scaler.is_enabled())
        self.meter = Meter(device)
        self.model.train()

    def __call__(self, batch: tuple, step: int) -> None:
        src, tgt_in, tgt_out = batch
        self.optimizer.zero_grad(set_to_none=True)
        with autocast(self.device, self.precision):
            sums = self.forward(src, tgt_in, tgt_out)
        n_tokens = tgt_out.numel()  # the loop counts them on the CPU; any constant will do here
        self.scaler.scale(sums.loss / n_tokens).backward()
        self.watch.loss(step, sums.loss)
        self.meter.add(sums, 0)
        self.scaler.unscale_(self.optimizer)
        grad_norm = clip_gradients(self.model, self.train.clip_norm)
        self.watch.grad_norm(step, grad_norm)
        self.scaler.step(self.optimizer)
        self.scaler.update()


class _LogitsLoss(nn.Module):
    """loss.py's label-smoothed loss of a model's whole logits."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, src: Tensor, tgt_in: Tensor, tgt_out: Tensor):
        return label_smoothed_nll(self.model(src, tgt_in), tgt_out, 0.1)


def side_by_side(trainees: list[LoopStep], data: list, device, steps: int, warmup: int,
                 rounds: int, clock=time.perf_counter) -> list[tuple]:  # fmt: skip
    """[(seconds per step, peak GPU memory above the weights and optimizer states of all the
    trainees, in bytes, or nan)] per trainee: each round times
    ``steps`` steps of every trainee in turn (so that other work on the machine slows them
    alike); the best round counts. ``clock``: wall-clock, or ``time.process_time`` for CPU
    seconds."""
    for trainee in trainees:
        for i in range(warmup):
            trainee(data[i % len(data)], i + 1)
    best = [(math.inf, math.nan)] * len(trainees)
    for _ in range(rounds):
        for j, trainee in enumerate(trainees):
            _sync(device)
            resident = torch.cuda.memory_allocated(device) if device.type == "cuda" else 0
            if device.type == "cuda":
                torch.cuda.reset_peak_memory_stats(device)
            start = clock()
            for i in range(steps):
                trainee(data[i % len(data)], warmup + i + 1)
            _sync(device)
            seconds = (clock() - start) / steps
            peak = (torch.cuda.max_memory_allocated(device) - resident if device.type == "cuda"
                    else math.nan)  # fmt: skip
            best[j] = min(best[j], (seconds, peak))
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--preset", default=None, help="default: small on a CPU, base on a GPU")
    parser.add_argument("--width", type=int, default=None,
                        help="d_model instead of the preset's (d_ff 4 x d_model)")  # fmt: skip
    parser.add_argument("--models", default="ours,nn.Transformer")
    parser.add_argument("--vocab", type=int, default=None, help="default: 8000 CPU, 32000 GPU")
    parser.add_argument("--batch", type=int, default=None, help="sentences per batch")
    parser.add_argument("--length", type=int, default=64, help="tokens per sentence (padded)")
    parser.add_argument("--steps", type=int, default=None, help="timed steps per round")
    parser.add_argument("--rounds", type=int, default=3, help="rounds per row; the best counts")
    parser.add_argument("--threads", type=int, default=0, help="CPU threads; 0: torch's default")
    parser.add_argument("--loss-chunk", type=int, default=RuntimeConfig().loss_chunk,
                        help="ours: runtime.loss_chunk (0: the whole logits)")  # fmt: skip
    parser.add_argument("--precisions", default=None, help="default: fp32,bf16 on a GPU or "
                        "a CPU with native bf16, else fp32")  # fmt: skip
    parser.add_argument("--cpu-time", action="store_true", help="time steps in CPU seconds, "
                        "not wall-clock: with --threads 1, other jobs count less")  # fmt: skip
    parser.add_argument("--no-compile", action="store_true")
    parser.add_argument("--report", type=Path, default=None,
                        help="default: results/train_speed_DEVICE.md")  # fmt: skip
    args = parser.parse_args()
    device = torch.device(args.device)
    gpu = device.type == "cuda"
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    vocab = args.vocab or (32000 if gpu else 8000)
    width = {"d_model": args.width, "d_ff": 4 * args.width} if args.width else {}
    config = ModelConfig.preset(args.preset or ("base" if gpu else "small"), src_vocab_size=vocab,
                                tgt_vocab_size=vocab, share_embeddings=True, **width)  # fmt: skip
    B, L = args.batch or (200 if gpu else 32), args.length
    steps, warmup = args.steps or (30 if gpu else 3), 5 if gpu else 2
    data = batches(config, B, L, 4, device)
    tokens = B * 2 * L  # source + target positions per step, padding included
    flops = 3 * forward_flops(config, B, L, L)
    bf16 = gpu or native_bf16_cpu() is not None
    precisions = (args.precisions or ("fp32,bf16" if bf16 else "fp32")).split(",")
    clock = time.process_time if args.cpu_time else time.perf_counter
    peaks = {p: matmul_peak(device, DTYPES[p], clock) for p in precisions}
    load = os.getloadavg()[0]
    rows = []
    for compiled in [False] if args.no_compile else [False, True]:
        trainees = []  # every model in every precision, timed in turn
        for precision in precisions:
            for name in args.models.split(","):
                trainees.append(LoopStep(name, config, device, precision, args.loss_chunk,
                                         compiled))  # fmt: skip
        timed = side_by_side(trainees, data, device, steps, warmup, args.rounds, clock)
        for trainee, (seconds, memory) in zip(trainees, timed, strict=True):
            achieved = flops / seconds
            rows.append({
                "model": trainee.name, "precision": trainee.precision, "compile": compiled,
                "tokens_per_s": tokens / seconds, "ms_per_step": 1000 * seconds,
                "peak_memory_gb": memory / 1e9, "tflops": achieved / 1e12,
                "mfu": achieved / peaks[trainee.precision],
            })  # fmt: skip
            print(rows[-1], flush=True)
        del trainees
    load = max(load, os.getloadavg()[0])
    lines = [
        f"Device: {torch.cuda.get_device_name(device) if gpu else cpu_name()} "
        f"({torch.get_num_threads()} threads), torch {torch.__version__}; `{config}` "
        f"batches of {B} x {L} source + target tokens ({tokens:,} per step); ours with "
        f"loss_chunk {args.loss_chunk}, both with fused AdamW; best of {args.rounds} rounds of "
        f"{steps} steps, the two models in turn, timed in "
        f"{'CPU seconds' if args.cpu_time else 'wall-clock seconds'}; load average up to "
        f"{load:.1f}; "
        + ", ".join(f"{p} matmul peak {v / 1e12:.2f} TFLOP/s" for p, v in peaks.items()),
        "",
        "| model | precision | compile | tokens/s | ms/step | peak step memory | model TFLOP/s "
        "| MFU |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        memory = f"{r['peak_memory_gb']:.2f} GB" if gpu else "(step_cost.py)"
        lines.append(
            f"| {r['model']} | {r['precision']} | {'yes' if r['compile'] else 'no'} | "
            f"{r['tokens_per_s']:,.0f} | {r['ms_per_step']:.1f} | {memory} | "
            f"{r['tflops']:.3f} | {100 * r['mfu']:.1f}% |"
        )
    by_key = {(r["model"], r["precision"], r["compile"]): r for r in rows}
    for (model_name, precision, compiled), ours in by_key.items():
        if model_name != "ours":
            continue
        if ("nn.Transformer", precision, compiled) in by_key:
            ref = by_key[("nn.Transformer", precision, compiled)]
            ratio = ours["tokens_per_s"] / ref["tokens_per_s"]
            lines.append(f"\nours / nn.Transformer, {precision}, compile {compiled}: {ratio:.2f}x")
        if precision != "fp32" and ("ours", "fp32", compiled) in by_key:
            gain = ours["tokens_per_s"] / by_key[("ours", "fp32", compiled)]["tokens_per_s"]
            lines.append(f"ours {precision} / ours fp32, compile {compiled}: {gain:.2f}x")
    text = "\n".join(lines) + "\n"
    print(text)
    report = args.report or RESULTS / f"train_speed_{device.type}.md"
    report.parent.mkdir(parents=True, exist_ok=True)
    report.write_text(text)


if __name__ == "__main__":
    main()
