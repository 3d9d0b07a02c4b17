"""Training speed, ours against a model built on ``torch.nn.Transformer``, measured side by side.

    .venv/bin/python benchmarks/train_speed.py                     # CPU rows (this machine)
    python3 benchmarks/train_speed.py --device cuda --preset base  # GPU rows (a GPU machine)

Both models have the same sizes, the same shared and tied embeddings, the same sinusoidal
positions, the same label-smoothed loss and the same batches (random ids, a tenth of each
sentence padding); each trains ``--steps`` timed Adam steps after a warm-up. Rows: fp32 (TF32
off) and, on a GPU, bf16 autocast; each eager and with ``torch.compile``. For each it reports
tokens/s (source + target, padding included), ms per step, peak memory, the model's FLOP/s
(3 × the forward matmul FLOPs: forward + backward) and MFU against the peak of a large matmul
measured in the same run, in the same precision. Writes ``results/train_speed_DEVICE.md``.
"""

from __future__ import annotations

import argparse
import math
import resource
import time
from pathlib import Path

import torch
from torch import Tensor, nn

from transformer.config import ModelConfig
from transformer.model import Transformer, sinusoidal_table
from transformer.training.loss import label_smoothed_nll
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


def matmul_peak(device: torch.device, dtype: torch.dtype) -> float:
    """FLOP/s of a large square matmul: the practical peak MFU is measured against."""
    n = 8192 if device.type == "cuda" else 2048
    a, b = (torch.randn(n, n, device=device, dtype=dtype) for _ in range(2))
    for _ in range(3):
        a @ b
    _sync(device)
    repeats = 20 if device.type == "cuda" else 5
    start = time.perf_counter()
    for _ in range(repeats):
        a @ b
    _sync(device)
    return 2 * n**3 * repeats / (time.perf_counter() - start)


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


def measure(model: nn.Module, data: list, device, precision: str, steps: int, warmup: int):
    """(seconds per step, peak memory in bytes) of Adam steps on ``data``."""
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9,
                                 fused=device.type == "cuda")  # fmt: skip
    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[precision]
    model.train()

    def step(i: int) -> None:
        src, tgt_in, tgt_out = data[i % len(data)]
        with torch.autocast(device.type, dtype=dtype, enabled=precision != "fp32"):
            logits = model(src, tgt_in)
            sums = label_smoothed_nll(logits, tgt_out, 0.1)
        optimizer.zero_grad(set_to_none=True)
        (sums.loss / sums.n_tokens).backward()
        optimizer.step()

    for i in range(warmup):
        step(i)
    _sync(device)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    start = time.perf_counter()
    for i in range(steps):
        step(i)
    _sync(device)
    seconds = (time.perf_counter() - start) / steps
    if device.type == "cuda":
        peak = torch.cuda.max_memory_allocated(device)
    else:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # process peak RSS
    return seconds, peak


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--preset", default=None, help="default: small on a CPU, base on a GPU")
    parser.add_argument("--vocab", type=int, default=None, help="default: 8000 CPU, 32000 GPU")
    parser.add_argument("--batch", type=int, default=None, help="sentences per batch")
    parser.add_argument("--length", type=int, default=64, help="tokens per sentence (padded)")
    parser.add_argument("--steps", type=int, default=None)
    parser.add_argument("--no-compile", action="store_true")
    args = parser.parse_args()
    device = torch.device(args.device)
    gpu = device.type == "cuda"
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    vocab = args.vocab or (32000 if gpu else 8000)
    config = ModelConfig.preset(args.preset or ("base" if gpu else "small"), src_vocab_size=vocab,
                                tgt_vocab_size=vocab, share_embeddings=True)  # fmt: skip
    B, L = args.batch or (200 if gpu else 32), args.length
    steps, warmup = args.steps or (30 if gpu else 8), 5 if gpu else 2
    data = batches(config, B, L, 4, device)
    tokens = B * 2 * L  # source + target positions per step, padding included
    flops = 3 * forward_flops(config, B, L, L)
    precisions = ["fp32", "bf16"] if gpu else ["fp32"]
    peaks = {p: matmul_peak(device, {"fp32": torch.float32, "bf16": torch.bfloat16}[p])
             for p in precisions}  # fmt: skip
    rows = []
    for precision in precisions:
        for compiled in [False] if args.no_compile else [False, True]:
            for name, build in (("ours", Transformer), ("nn.Transformer", TorchTransformer)):
                torch.manual_seed(0)
                model = build(config).to(device)
                run = torch.compile(model) if compiled else model
                seconds, memory = measure(run, data, device, precision, steps, warmup)
                achieved = flops / seconds
                rows.append({
                    "model": name, "precision": precision, "compile": compiled,
                    "tokens_per_s": tokens / seconds, "ms_per_step": 1000 * seconds,
                    "peak_memory_gb": memory / 1e9, "tflops": achieved / 1e12,
                    "mfu": achieved / peaks[precision],
                })  # fmt: skip
                print(rows[-1], flush=True)
                del model, run
    lines = [
        f"Device: {torch.cuda.get_device_name(device) if gpu else 'CPU'} "
        f"({torch.get_num_threads()} threads), torch {torch.__version__}; `{config}` "
        f"batches of {B} x {L} source + target tokens ({tokens:,} per step); "
        + ", ".join(f"{p} matmul peak {v / 1e12:.2f} TFLOP/s" for p, v in peaks.items()),
        "",
        "| model | precision | compile | tokens/s | ms/step | peak memory | model TFLOP/s | MFU |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['model']} | {r['precision']} | {'yes' if r['compile'] else 'no'} | "
            f"{r['tokens_per_s']:,.0f} | {r['ms_per_step']:.1f} | {r['peak_memory_gb']:.2f} GB | "
            f"{r['tflops']:.3f} | {100 * r['mfu']:.1f}% |"
        )
    by_key = {(r["model"], r["precision"], r["compile"]): r for r in rows}
    for (model_name, precision, compiled), ours in by_key.items():
        if model_name == "ours":
            ref = by_key[("nn.Transformer", precision, compiled)]
            ratio = ours["tokens_per_s"] / ref["tokens_per_s"]
            lines.append(f"\nours / nn.Transformer, {precision}, compile {compiled}: {ratio:.2f}x")
    text = "\n".join(lines) + "\n"
    print(text)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"train_speed_{device.type}.md").write_text(text)


if __name__ == "__main__":
    main()
