"""Decoding speed: greedy and beam search, with and without the key/value cache.

    .venv/bin/python benchmarks/decode_speed.py [--sentences 64] [--steps 25] [--weights FILE]
    python3 benchmarks/decode_speed.py --device cuda        # the GPU rows, on a GPU machine

Builds a ``small``-preset model (random weights unless ``--weights`` gives a state dict), draws
random source sentences of 10-30 tokens, decodes them through ``translate_ids`` (batched by
length) and prints sentences/s and target tokens/s (the fastest of ``--repeats`` runs).

Fixed output length: a random model says EOS at arbitrary times, which would make the runs do
different amounts of work. So the model is wrapped to hold EOS back (its logit lowered by 1e4:
never chosen while any other token is allowed) and ``max_len_a = 0, max_len_b = --steps``:
every hypothesis has exactly ``--steps`` tokens, then the EOS the search forces at the limit.
Tokens/s counts those ``--steps + 1`` output tokens per sentence (not the K beams' work).

Run by hand, not by pytest. Shapes: B batch, S source length, T target length, V vocabulary.
"""

from __future__ import annotations

import argparse
import time

import torch
from torch import nn

from transformer.config import DecodeConfig, ModelConfig
from transformer.inference import translate_ids
from transformer.inference.compiled import compile_decoding
from transformer.model import Transformer
from transformer.vocab import EOS_ID

FIRST_PIECE = 4  # ids below are PAD, UNK, BOS, EOS


def hold_back_eos(model: Transformer) -> Transformer:
    """The model with EOS's logit lowered by 1e4 (in its final linear layer's bias; a bias of
    zeros added where it has none), so that only the length limit ends a sentence. In the
    model's own layer, so that the engine packs it (model/linear.py) and compiles it as it
    would any other."""
    final = model.output
    with torch.no_grad():
        if final.bias is None:
            final.bias = nn.Parameter(final.weight.new_zeros(final.out_features))
        final.bias[EOS_ID] -= 1e4
    return model


def build_model(args: argparse.Namespace) -> Transformer:
    config = ModelConfig.preset(args.preset, src_vocab_size=args.vocab, tgt_vocab_size=args.vocab)
    torch.manual_seed(args.seed)
    model = Transformer(config)
    if args.weights:
        state = torch.load(args.weights, map_location="cpu")
        model.load_state_dict(state.get("model", state))  # a state dict, or a dict holding one
    return model.eval()


def random_sentences(args: argparse.Namespace) -> list[list[int]]:
    """Source sentences of min_len..max_len random pieces, the last one EOS (as the data has)."""
    generator = torch.Generator().manual_seed(args.seed)
    lengths = torch.randint(args.min_len, args.max_len + 1, (args.sentences,), generator=generator)
    return [
        torch.randint(FIRST_PIECE, args.vocab, (int(n) - 1,), generator=generator).tolist()
        + [EOS_ID]
        for n in lengths
    ]


def measure(
    model: nn.Module, sentences: list[list[int]], config: DecodeConfig, cache: bool, repeats: int
) -> float:
    """Seconds to decode all sentences: the fastest of ``repeats`` runs, after a warm-up."""
    translate_ids(model, sentences[:2], config, use_cache=cache)
    device = next(model.parameters()).device
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        results = translate_ids(model, sentences, config, use_cache=cache)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        times.append(time.perf_counter() - start)
        assert all(len(hyps[0].tokens) == config.max_len_b for hyps in results)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="small")
    parser.add_argument("--weights", help="a state dict for the preset (default: random init)")
    parser.add_argument("--vocab", type=int, default=8000, help="source and target vocabulary")
    parser.add_argument("--sentences", type=int, default=64)
    parser.add_argument("--min-len", type=int, default=10, help="source tokens, EOS included")
    parser.add_argument("--max-len", type=int, default=30)
    parser.add_argument("--steps", type=int, default=25, help="output tokens per sentence")
    parser.add_argument("--beam", type=int, default=4)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=2, help="runs per setting; the fastest")
    parser.add_argument("--threads", type=int, default=0, help="torch threads; 0: default")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N")
    parser.add_argument("--compile", action="store_true", help="also runtime.compile's step")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    model = hold_back_eos(build_model(args)).to(args.device)
    compiled = hold_back_eos(build_model(args)).to(args.device) if args.compile else None
    if compiled is not None and not compile_decoding(compiled):
        compiled = None
    sentences = random_sentences(args)
    params = sum(p.numel() for p in model.parameters())
    src_tokens = sum(len(s) for s in sentences)
    print(
        f"{args.preset} model, {params / 1e6:.1f}M parameters, vocab {args.vocab}, "
        f"{args.device}, {torch.get_num_threads()} threads; {len(sentences)} sentences, "
        f"{src_tokens} source tokens, {args.steps} + EOS output tokens each, batches of "
        f"{args.batch_size}"
    )
    print(f"{'search':<8} {'cache':<6} {'seconds':>8} {'sent/s':>8} {'tok/s':>8} {'speed-up':>9}")
    out_tokens = len(sentences) * (args.steps + 1)
    for name, beam in (("greedy", 1), (f"beam {args.beam}", args.beam)):
        config = DecodeConfig(
            beam_size=beam, max_len_a=0.0, max_len_b=args.steps, batch_size=args.batch_size
        )
        cached = measure(model, sentences, config, True, args.repeats)
        uncached = measure(model, sentences, config, False, args.repeats)
        rows = [("yes", cached), ("no", uncached)]
        if compiled is not None:
            start = time.perf_counter()
            translate_ids(compiled, sentences[:8], config)  # compiles
            print(f"compiling the step (and 8 sentences): {time.perf_counter() - start:.1f} s")
            rows.append(("compiled", measure(compiled, sentences, config, True, args.repeats)))
        for label, seconds in rows:
            speed_up = f"{uncached / seconds:.1f}x"
            print(
                f"{name:<8} {label:<6} {seconds:>8.2f} {len(sentences) / seconds:>8.1f} "
                f"{out_tokens / seconds:>8.0f} {speed_up:>9}"
            )


if __name__ == "__main__":
    main()
