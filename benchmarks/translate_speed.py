"""Translation speed side by side: our torch decoder, CTranslate2 fp32 / int8, Hugging Face Marian.

    .venv/bin/pip install -e '.[ct2,bench]'      # ctranslate2, and transformers for Marian
    .venv/bin/python benchmarks/translate_speed.py                       # fixed lengths only
    .venv/bin/python benchmarks/translate_speed.py --model runs/multi30k-de-en   # and a run
    .venv/bin/python benchmarks/translate_speed.py --threads 2,1    # each table on 2, then 1

One run compares, on the same model and the same sentences, greedy search and beam 4 through:
- ``torch``: our decoder (``translate_ids``) as ``transformer translate`` runs it, with the
  key/value cache and ``runtime.inter_threads``' default (a batch per thread at once,
  inference/parallel.py) and the linear layers' weights packed for oneDNN
  (``runtime.pack_weights``, model/linear.py); ``torch-mkl``: that with PyTorch's own products
  (``--runtime.pack_weights false``); ``torch-bf16``: the packed layers in bf16
  (``--runtime.precision bf16``, or ``auto`` on a CPU with native bf16); ``torch-serial``: one
  batch at a time on all the threads;
  ``torch-compiled``: with ``runtime.compile`` (inference/compiled.py: one batch at a time,
  compiled during the warm-up, whose seconds the table gives);
  ``torch-nocache``: that without the cache; ``torch-copies``: ``torch`` with the encoder output
  and its keys and values copied into every beam's row, as before beams shared them
  (``EncoderDecoder.beams_share_memory``);
- ``ct2-float32`` and ``ct2-int8``: the model exported with ``transformer.export`` and run with
  the ctranslate2 engine's option mapping (patience 2; a batch per thread at once, batches cut
  as ours are); ``ct2-int8-p1``: int8 with CTranslate2's default patience 1, to show what
  patience 2 costs;
- ``marian``: Hugging Face ``MarianMTModel.generate``, the closest architecture (post-norm,
  sinusoidal positions, √d_model scale, biases, ReLU or swish), with our weights copied in, so
  that it computes the same function (the "same as ours" column counts the sentences whose best
  output equals ours token for token).

Settings (both in one run when ``--model`` is given):
- ``fixed``: the ``small`` preset (``--preset``; or ``--size``, one of sizes.py's: demo, small,
  opus-mt) with random weights (vocab 8000), 64 source
  sentences of 10-30 tokens; every output is forced to 26 decoder steps (25 tokens + EOS for
  ours, whose search forces EOS at the limit while EOS is held back; ``min = max = 26`` new
  tokens for CTranslate2 and Marian), so every engine does the same work;
- ``run``: a trained model directory on its own test split (``--limit`` sentences), natural
  lengths, in batches of the size ``transformer translate`` uses for the model and the search
  (``decode.batch_size``; 0: ``DecodeConfig.sentences_per_batch``), or ``--batch``, with each
  engine's BLEU.

Timing on a shared machine. Each row runs in a fresh process on ``--threads`` threads: a warm-up
on 8 sentences, then one timed pass over all of them. The rows are measured in ``--rounds``
rounds, every engine once per round, and each row keeps its fastest pass: a burst of load from
other work slows one pass, not one engine. A 512×512 matmul probe measures the CPU (GFLOP/s on
the same threads) just before and just after each pass; a pass during which it fell below 70%
of the best probe is run again 20 s later (up to 6 times). The table gives the probes' range
for the passes kept, to show how busy the machine was.
Peak memory is the peak resident memory above the process's size after its imports (model +
search). Tokens/s counts output tokens including EOS (26 per sentence in ``fixed``).
``--device cuda``: every engine on the GPU (ours one batch at a time, its weights not packed,
which is for CPUs; CTranslate2 with ``device="cuda"``; ``generate`` on the GPU), timed to the
GPU's end (``torch.cuda.synchronize``), peak memory the GPU memory PyTorch allocated (our
engine and ``generate``; CTranslate2's own allocator is not seen: 0), and no CPU probe.
Writes the tables to ``--markdown``.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from importlib.metadata import version
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from decode_speed import hold_back_eos, random_sentences  # noqa: E402 (own folder)
from machine import cpu_name  # noqa: E402
from marian import marian_runner  # noqa: E402
from sizes import SIZES, config_of  # noqa: E402

from transformer.config import DecodeConfig, ModelConfig, RuntimeConfig  # noqa: E402
from transformer.data.corpora import load_splits  # noqa: E402
from transformer.inference import translate_ids  # noqa: E402
from transformer.inference.compiled import compile_decoding  # noqa: E402
from transformer.inference.engine import pack_for_translation  # noqa: E402
from transformer.inference.evaluate import score_translations  # noqa: E402
from transformer.inference.parallel import DecodeThreads, decode_threads  # noqa: E402
from transformer.model import Transformer  # noqa: E402
from transformer.model_dir.checkpoints import load_checkpoint, read_config, resolve_checkpoint
from transformer.vocab import BOS_ID, EOS_ID, PAD_ID, UNK_ID  # noqa: E402

ENGINES = [
    "torch",
    "torch-compiled",
    "torch-mkl",
    "torch-bf16",
    "torch-serial",
    "torch-nocache",
    "torch-copies",
    "ct2-float32",
    "ct2-int8",
    "ct2-int8-p1",
    "marian",
]
SEARCHES = {"greedy": 1, "beam 4": 4}
STEPS = 25  # fixed setting: output tokens before EOS
WARM_UP = 8  # sentences
QUIET = 0.7  # a pass counts when the CPU probes around it reach 70% of the best probe
RETRIES = 6  # passes of one row in one round at most, while the CPU stays busy
RESULTS = Path(__file__).parent / "results"


# --- the models, as each engine loads them ----------------------------------------------------
def torch_model(args: argparse.Namespace) -> Transformer:
    """Our model: the run's best checkpoint, or ``--size`` (else ``--preset`` and ``--vocab``)
    with seeded random weights."""
    if args.setting == "run":
        return load_checkpoint(Path(args.model)).model
    torch.manual_seed(args.seed)
    return Transformer(fixed_config(args)).eval()


def fixed_config(args: argparse.Namespace) -> ModelConfig:
    """The random model's config: one of ``sizes.SIZES``, or a preset with ``--vocab``."""
    if args.size:
        return config_of(args.size)
    return ModelConfig.preset(args.preset, src_vocab_size=args.vocab, tgt_vocab_size=args.vocab)


def ct2_folder(args: argparse.Namespace, model: Transformer, quantization: str, out: Path) -> None:
    """Exports ``model`` for CTranslate2 (a run through ``export_model``; the random model with
    stand-in pieces "p4", "p5", ... since it has no tokenizer)."""
    from transformer.export import export_model, transformer_spec

    if args.setting == "run":
        export_model(args.model, out, quantization)
        return
    vocab = model.config.tgt_vocab_size
    pieces = ["<pad>", "<unk>", "<s>", "</s>"] + [f"p{i}" for i in range(4, vocab)]
    spec = transformer_spec(model, pieces, pieces)
    spec.optimize(quantization=quantization)
    out.mkdir()
    spec.save(str(out))


# --- one row: a fresh process ----------------------------------------------------------------
def rss_mb(field: str = "VmRSS") -> float:
    """The process's resident memory now (VmRSS), or its peak so far (VmHWM). Not getrusage's
    ru_maxrss: a child started by subprocess inherits the parent's peak in it across exec."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) / 1024
    return 0.0


def worker(args: argparse.Namespace) -> dict:
    """Times one engine and search; returns what it measured (and its outputs, for BLEU)."""
    torch.set_num_threads(args.threads)
    sentences = json.loads(Path(args.bench, "sentences.json").read_text())
    decode = _decode(args, SEARCHES[args.search])
    library = {"ct2": "ctranslate2", "marian": "transformers"}.get(args.engine.split("-")[0])
    if library:
        importlib.import_module(library)  # before the base: the library is not the search
    base = rss_mb()
    run = _runner(args, decode)
    gpu = args.device.startswith("cuda")
    start = time.perf_counter()
    run(sentences[:WARM_UP])  # lazy initialisations, allocator pools; compiling
    warm_up = time.perf_counter() - start
    if gpu:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    outputs = run(sentences)
    if gpu:
        torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    peak_mb = torch.cuda.max_memory_allocated() / 2**20 if gpu else rss_mb("VmHWM") - base
    if args.setting == "fixed":
        assert all(len(o) == STEPS for o in outputs), "every output must have 25 tokens + EOS"
    return {"engine": args.engine, "search": args.search, "seconds": seconds,
            "sentences": len(sentences), "tokens": sum(len(o) + 1 for o in outputs),
            "peak_mb": peak_mb, "warm_up": warm_up, "outputs": outputs}  # fmt: skip


def _decode(args: argparse.Namespace, beam: int) -> DecodeConfig:
    if args.setting == "fixed":
        return DecodeConfig(beam_size=beam, max_len_a=0.0, max_len_b=STEPS, batch_size=64)
    # The saved config only: loading the weights runs torch on several threads, which slows
    # CTranslate2's threads in the same process (export/engine.py, _torch_on_one_thread).
    # Batches of the model's own size, as `transformer translate` cuts them (decode.batch_size,
    # or DecodeConfig.sentences_per_batch's for the search), the same for every engine.
    # ``--batch``: that many instead, for every engine.
    saved = read_config(resolve_checkpoint(Path(args.model)))
    return saved.decode.with_search(beam_size=beam, batch_size=args.batch).sized_for(saved.model)


def engine_model(args: argparse.Namespace, device: torch.device) -> Transformer:
    """Our model as ``args.engine`` runs it: on a CPU its layers packed as ``transformer
    translate`` packs them (all but torch-compiled and torch-mkl); in the fixed setting EOS held
    back in its own output layer, which is then packed like any other."""
    model = torch_model(args).to(device)
    if args.engine == "torch-copies":
        model.beams_share_memory = False
    if args.setting == "fixed":
        hold_back_eos(model)
    packs = device.type == "cpu" and args.engine not in ("torch-compiled", "torch-mkl")
    if packs:  # as `transformer translate` on a CPU
        dtype = torch.bfloat16 if args.engine == "torch-bf16" else torch.float
        pack_for_translation(model, dtype)
    if args.engine == "torch-compiled":
        compile_decoding(model)
    return model


def _runner(args: argparse.Namespace, decode: DecodeConfig):
    """A function that translates sentences (source ids) and returns the best output ids."""
    device = torch.device(args.device)
    if args.engine.startswith("torch"):
        model = engine_model(args, device)
        cache = args.engine != "torch-nocache"
        # torch and torch-compiled: as `transformer translate` runs, batches at once
        # (parallel.py); the others one batch at a time on all the threads
        runtime = RuntimeConfig(threads=args.threads, compile=args.engine == "torch-compiled")
        threads = decode_threads(runtime, device)  # one batch at a time on a GPU
        at_once = ("torch", "torch-mkl", "torch-bf16", "torch-compiled", "torch-copies")
        threads = threads if args.engine in at_once else DecodeThreads()

        def run(sentences: list[list[int]]) -> list[list[int]]:
            found = translate_ids(model, sentences, decode, cache, threads=threads)
            return [h[0].tokens for h in found]

        return run
    if args.engine.startswith("ct2"):
        return _ct2_runner(args, decode)
    return marian_runner(torch_model(args), decode, args.setting == "fixed", STEPS, device)


def _ct2_runner(args: argparse.Namespace, decode: DecodeConfig):
    import ctranslate2

    from transformer.inference.ctranslate2 import (
        PATIENCE,
        load_ctranslate2,
        translate_batch_options,
    )

    quantization = args.engine.split("-")[1]
    folder = Path(args.bench, f"ct2-{quantization}")
    patience = 1.0 if args.engine.endswith("-p1") else PATIENCE
    if args.setting == "run":
        runtime = RuntimeConfig(device=args.device, threads=args.threads)
        engine = load_ctranslate2(
            folder, runtime=runtime, beam_size=decode.beam_size, batch_size=decode.batch_size
        )
        engine = replace(engine, patience=patience)  # its options again, with this patience
        return lambda sentences: [h[0].tokens for h in engine.search_ids(sentences)]
    # As the ctranslate2 engine runs: a batch per thread at once, batches cut as ours are.
    gpu = args.device.startswith("cuda")
    ct2_model = ctranslate2.Translator(
        str(folder), device="cuda" if gpu else "cpu", inter_threads=1 if gpu else args.threads,
        intra_threads=1, device_index=int(args.device.partition(":")[2] or 0),
    )  # fmt: skip
    options = translate_batch_options(decode, {PAD_ID: "<pad>", BOS_ID: "<s>"}, patience)
    options |= {"min_decoding_length": STEPS + 1, "max_decoding_length": STEPS + 1}
    threads = DecodeThreads() if gpu else DecodeThreads(inter=args.threads, total=args.threads)

    def run(sentences: list[list[int]]) -> list[list[int]]:
        source = [[f"p{i}" if i > EOS_ID else "</s>" for i in s] for s in sentences]
        size = threads.batch_size(len(sentences), 64)
        results = ct2_model.translate_batch(source, max_batch_size=size, **options)
        return [[_id(p) for p in r.hypotheses[0]][:STEPS] for r in results]

    return run


def _id(piece: str) -> int:
    """The id of one of ``prepare``'s pieces: ``p{id}``, or a special one (a random model may
    well write ``<unk>``)."""
    specials = {"<pad>": PAD_ID, "<unk>": UNK_ID, "<s>": BOS_ID, "</s>": EOS_ID}
    return specials[piece] if piece in specials else int(piece[1:])


# --- the whole comparison --------------------------------------------------------------------
def prepare(args: argparse.Namespace, bench: Path) -> list[str]:
    """Writes the sentences and the CTranslate2 exports into ``bench``; returns the references
    (the test split's targets; none for random sentences)."""
    model = torch_model(args)
    if args.setting == "fixed":
        sentences = random_sentences(argparse.Namespace(
            seed=args.seed, min_len=10, max_len=30, sentences=64,
            vocab=model.config.src_vocab_size))  # fmt: skip
        references: list[str] = []
    else:
        from transformer.data.batching import encode_source
        from transformer.data.tokenizer import Tokenizers

        loaded = load_checkpoint(Path(args.model))
        pairs = load_splits(loaded.config.data).test[: args.limit]
        src = Tokenizers.load(args.model, read_config(Path(args.model)).model.vocab_sizes).src
        limit = loaded.config.model.max_positions
        sentences = [encode_source(src.encode(s))[-limit:] for s, _ in pairs]
        references = [t for _, t in pairs]
    Path(bench, "sentences.json").write_text(json.dumps(sentences))
    for quantization in ("float32", "int8"):
        ct2_folder(args, model, quantization, bench / f"ct2-{quantization}")
    return references


def cpu_probe(threads: int) -> float:
    """GFLOP/s of 512×512 float32 matmuls on ``threads`` threads: how much CPU we get now."""
    torch.set_num_threads(threads)
    a, b = torch.randn(512, 512), torch.randn(512, 512)
    start = time.perf_counter()
    for _ in range(50):
        a @ b
    return 50 * 2 * 512**3 / (time.perf_counter() - start) / 1e9


def measure(args: argparse.Namespace, bench: Path, engines: list[str]) -> tuple[list, list]:
    """Every (search, engine) row, fastest of ``--rounds``; and the CPU probe of each pass kept
    (the lower of the probes just before and just after it)."""
    best: dict[tuple[str, str], dict] = {}
    probes = []
    # on a GPU the time is the GPU's: no probe of the CPU (every pass kept, probe 1)
    probed = cpu_probe if args.device == "cpu" else lambda _threads: 1.0
    top = max(probed(args.threads) for _ in range(3))  # the CPU when nobody else uses it
    for round_ in range(args.rounds):
        for search in SEARCHES:
            for engine in engines:
                command = [sys.executable, __file__, *sys.argv[1:], "--setting", args.setting,
                           "--threads", str(args.threads), "--bench", str(bench),
                           "--worker", engine, search]  # fmt: skip
                for _ in range(RETRIES):
                    before = probed(args.threads)
                    done = subprocess.run(command, capture_output=True, text=True)
                    if done.returncode:
                        sys.exit(f"{engine} {search} failed:\n{done.stderr[-3000:]}")
                    probe = min(before, probed(args.threads))
                    top = max(top, before, probe)
                    if probe >= QUIET * top:
                        break
                    print(f"  busy CPU ({probe:.0f} of {top:.0f} GFLOP/s): {engine} {search} "
                          "again in 20 s", file=sys.stderr)  # fmt: skip
                    time.sleep(20)
                row = json.loads(done.stdout.splitlines()[-1])
                probes.append(probe)
                key = (search, engine)
                if key not in best or row["seconds"] < best[key]["seconds"]:
                    best[key] = row | {
                        "peak_mb": max(row["peak_mb"], best.get(key, row)["peak_mb"])
                    }
                print(f"  {args.setting} round {round_ + 1}: {engine:<14} {search:<7} "
                      f"{row['seconds']:7.2f} s  (CPU {probe:.0f} GFLOP/s)",
                      file=sys.stderr)  # fmt: skip
    return [best[(s, e)] for s in SEARCHES for e in engines], probes


def table(args: argparse.Namespace, rows: list[dict], probes: list, references: list) -> list:
    """The markdown lines of one setting: the table, then the ratios against their targets."""
    tgt = None
    if references:
        from transformer.data.tokenizer import Tokenizers

        tgt = Tokenizers.load(args.model, read_config(Path(args.model)).model.vocab_sizes).tgt
    c = fixed_config(args)
    name = f"`{args.size}` size" if args.size else f"`{args.preset}` preset"
    sizes = " / ".join(str(_decode(args, beam).batch_size) for beam in SEARCHES.values())
    what = (f"`{args.model}`, its test split ({len(references)} sentences), natural lengths, "
            f"{sizes} sentences a batch ({' / '.join(SEARCHES)})"
            if tgt else f"{name} (d_model {c.d_model}, {c.n_encoder_layers} + "
            f"{c.n_decoder_layers} layers, d_ff {c.d_ff}, {c.activation}, vocab "
            f"{c.tgt_vocab_size}), random weights, "
            "64 sentences of 10-30 tokens, every output 25 tokens + EOS")  # fmt: skip
    threads = f"{args.threads} thread{'s' if args.threads > 1 else ''}"
    where = (f"CPU probe around the passes {min(probes):.0f}-{max(probes):.0f} GFLOP/s (median "
             f"{sorted(probes)[len(probes) // 2]:.0f})" if args.device == "cpu"
             else f"on {args.device}, peak MB: the GPU memory PyTorch allocated")  # fmt: skip
    lines = [f"**{args.setting}**: {what}; {threads}, fastest of {args.rounds} "
             f"rounds; {where}.", "",
             "| search | engine | seconds | sentences/s | tokens/s | peak MB | speed vs ours "
             "| same as ours | warm-up s |" + (" BLEU |" if tgt else ""),
             "|---|---|---|---|---|---|---|---|---|" + ("---|" if tgt else "")]  # fmt: skip
    seconds = {(r["search"], r["engine"]): r["seconds"] for r in rows}
    bleu = {}
    for row in rows:
        ours = next(r for r in rows if r["search"] == row["search"] and r["engine"] == "torch")
        s = row["seconds"]
        same = sum(a == b for a, b in zip(row["outputs"], ours["outputs"], strict=True))
        line = (f"| {row['search']} | {row['engine']} | {s:.2f} | {row['sentences'] / s:.1f} | "
                f"{row['tokens'] / s:,.0f} | {row['peak_mb']:.0f} | {ours['seconds'] / s:.2f}× | "
                f"{same}/{len(row['outputs'])} | {row['warm_up']:.1f} |")  # fmt: skip
        if tgt:
            hypotheses = [tgt.decode(o) for o in row["outputs"]]
            bleu[row["search"], row["engine"]] = score_translations(hypotheses, references)[0]
            line += f" {bleu[row['search'], row['engine']].score:.2f} |"
        lines.append(line)
    ratios = []
    for search in SEARCHES:
        if (search, "ct2-float32") in seconds:
            ratio = seconds[search, "ct2-float32"] / seconds[search, "torch"]
            ratios.append(f"| ours vs CTranslate2 fp32, {search} | {ratio:.2f}× | ≥ 0.8× |")
        if (search, "marian") in seconds:
            ratio = seconds[search, "marian"] / seconds[search, "torch"]
            target = "≥ 1.3×" if search == "greedy" else "≥ 1.8×"
            ratios.append(f"| ours vs Marian, {search} | {ratio:.2f}× | {target} |")
    if ("beam 4", "ct2-int8") in seconds:
        ratio = seconds["beam 4", "torch"] / seconds["beam 4", "ct2-int8"]
        ratios.append(f"| CTranslate2 int8 vs ours, beam 4 | {ratio:.2f}× | ≥ 3× |")
    if ("beam 4", "ct2-int8") in bleu:
        a, b = bleu["beam 4", "torch"].score, bleu["beam 4", "ct2-int8"].score
        ratios.append(f"| BLEU, CTranslate2 int8 vs ours, beam 4 | {b:.2f} vs {a:.2f} "
                     f"({b - a:+.2f}) | within 0.3 |")  # fmt: skip
    if ratios:
        lines += ["", "| ratio | measured | target |", "|---|---|---|", *ratios]
    return lines + [""]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", help="also the `run` setting: a trained model directory")
    parser.add_argument("--limit", type=int, default=1000, help="run: test sentences")
    parser.add_argument("--batch", type=int, default=0, help="run: sentences a batch, every "
                        "engine (0: as `transformer translate` cuts them)")  # fmt: skip
    parser.add_argument("--settings", help="fixed,run or one of them (default: both with --model)")
    parser.add_argument("--engines", default=",".join(ENGINES))
    parser.add_argument("--threads", default="2", help="CPU threads, or a list: 2,1")
    parser.add_argument("--device", default="cpu", help="cpu, or cuda (cuda:N) for GPU rows")
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds; the fastest counts")
    parser.add_argument("--preset", default="small", help="fixed: the model's size")
    parser.add_argument("--vocab", type=int, default=8000, help="fixed: vocabulary size")
    parser.add_argument("--size", choices=sorted(SIZES), help="fixed: one of sizes.py's "
                        "models instead of --preset and --vocab")  # fmt: skip
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--markdown", default=str(RESULTS / "translate_speed.md"))
    parser.add_argument("--setting", help=argparse.SUPPRESS)
    parser.add_argument("--worker", nargs=2, metavar=("ENGINE", "SEARCH"), help=argparse.SUPPRESS)
    parser.add_argument("--bench", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        args.engine, args.search = args.worker
        args.threads = int(args.threads)
        print(json.dumps(worker(args)))
        return
    versions = ", ".join(f"{p} {version(p)}" for p in ("torch", "ctranslate2", "transformers"))
    lines = [f"`{shlex.join(['python', 'benchmarks/translate_speed.py', *sys.argv[1:]])}`", "",
             f"{time.strftime('%Y-%m-%d %H:%M')}; {cpu_name()}, {os.cpu_count()} cores; "
             f"{versions}.", ""]  # fmt: skip
    settings = args.settings.split(",") if args.settings else ["fixed"] + ["run"] * bool(args.model)
    if "run" in settings and not args.model:
        sys.exit("--settings run needs --model MODEL_DIR")
    for setting in settings:
        args.setting = setting
        with tempfile.TemporaryDirectory(prefix="translate-speed-") as bench:
            references = prepare(args, Path(bench))
            for threads in [int(t) for t in args.threads.split(",")]:
                args_now = argparse.Namespace(**{**vars(args), "threads": threads})
                rows, probes = measure(args_now, Path(bench), args.engines.split(","))
                lines += table(args_now, rows, probes, references)
    Path(args.markdown).parent.mkdir(parents=True, exist_ok=True)
    Path(args.markdown).write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
