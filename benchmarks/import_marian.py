"""Importing an opus-mt-sized Marian model, and translating with it: ours against Hugging Face.

    .venv/bin/pip install -e '.[dev]'             # transformers, sentencepiece
    .venv/bin/python benchmarks/import_marian.py --markdown benchmarks/results/import_marian.md

1. A random ``MarianMTModel`` of opus-mt-en-de's size: d_model 512, 6 + 6 layers, 8 heads,
   d_ff 2048, swish, one shared and tied vocabulary of 58,101 entries (SentencePiece models of
   at most 8,000 pieces trained on Multi30k's English and German, the rest filler pieces),
   written with ``save_pretrained`` in float32, with its tokenizer files.
2. ``transformer import`` of that folder, in a child process: wall time and peak resident
   memory (the child's own ``VmHWM``); the same for a child that only imports the package and
   torch (the baseline), so that the import's own memory is the difference. Compared with the
   weights file's size. (Not ``ru_maxrss``: Linux carries a parent's peak over fork and exec
   into the child's, and this parent holds the model.)
3. The imported model against ``MarianMTModel.generate`` on the same 500 English sentences of
   Multi30k's test2016, greedy and beam 4, fp32, 2 threads: 64 sentences a batch, sorted by
   length, for both; ours as ``transformer translate`` runs it (its linear layers packed, a
   batch per thread), ``generate`` one batch at a time on both threads. Random weights run
   every sentence to the length limit, so both make 32
   tokens and the forced </s> for every sentence (``forced_eos_token_id``; ours forces </s>
   there too): equal work. α = 0 in both (their length penalties differ). The rounds alternate
   ours and theirs; each keeps its fastest pass. The outputs are compared token for token.

The load average is written before and after: the machine is shared.
"""

from __future__ import annotations

import argparse
import gzip
import io
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import sentencepiece as spm
import torch

from transformer.config import DecodeConfig, RuntimeConfig
from transformer.data.batching import encode_source
from transformer.data.tokenizer import Tokenizers
from transformer.inference import translate_ids
from transformer.inference.engine import pack_for_translation
from transformer.inference.parallel import decode_threads
from transformer.model_dir.checkpoints import load_checkpoint, read_config

ROOT = Path(__file__).resolve().parents[1]
MULTI30K = ROOT.parent / "shared" / "data" / "multi30k"
VOCAB = 58101  # opus-mt-en-de's, <pad> included
LIMIT = 32  # output tokens before the forced </s>


def lines(name: str) -> list[str]:
    with gzip.open(MULTI30K / name, "rt", encoding="utf-8") as f:
        return [line.strip() for line in f]


def sentencepiece(text: list[str]) -> bytes:
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(text), model_writer=model,
                                   vocab_size=8000, hard_vocab_limit=False,  # German: fewer
                                   model_type="unigram", minloglevel=2)  # fmt: skip
    return model.getvalue()


def build(folder: Path) -> None:
    """The random opus-mt-sized Marian folder."""
    from transformers import MarianConfig, MarianMTModel

    src, tgt = sentencepiece(lines("train.en.gz")), sentencepiece(lines("train.de.gz"))
    pieces: set[str] = set()
    for model in (src, tgt):
        sp = spm.SentencePieceProcessor(model_proto=model)
        pieces |= {sp.id_to_piece(i) for i in range(3, sp.get_piece_size())}
    middle = sorted(pieces)
    middle += [f"▁filler{i}" for i in range(VOCAB - 3 - len(middle))]
    vocab = {p: i for i, p in enumerate(["</s>", "<unk>", *middle, "<pad>"])}
    config = MarianConfig(
        vocab_size=VOCAB, d_model=512, encoder_layers=6, decoder_layers=6,
        encoder_attention_heads=8, decoder_attention_heads=8, encoder_ffn_dim=2048,
        decoder_ffn_dim=2048, activation_function="swish", max_position_embeddings=512,
        pad_token_id=VOCAB - 1, decoder_start_token_id=VOCAB - 1, eos_token_id=0,
        forced_eos_token_id=0, scale_embedding=True, init_std=0.2,
    )  # fmt: skip
    torch.manual_seed(0)
    model = MarianMTModel(config).eval()
    with torch.no_grad():
        model.final_logits_bias.normal_()
        model.final_logits_bias[0, VOCAB - 1] = 0.0
    model.save_pretrained(folder)
    (folder / "source.spm").write_bytes(src)
    (folder / "target.spm").write_bytes(tgt)
    (folder / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False))
    (folder / "tokenizer_config.json").write_text(json.dumps({"separate_vocabs": False}))


# Runs the code in argv[2], then writes the process's own peak resident memory (VmHWM, kB:
# this address space's, from exec on) into the file argv[1].
PEAK = """import atexit, sys
def peak(report=sys.argv[1]):
    with open("/proc/self/status") as f:
        kb = next(line.split()[1] for line in f if line.startswith("VmHWM:"))
    with open(report, "w") as f:
        f.write(kb)
atexit.register(peak)
exec(sys.argv[2])
"""


def child(code: str) -> tuple[float, float]:
    """(seconds, peak resident MB) of a child Python process running ``code``."""
    with tempfile.TemporaryDirectory() as work:
        report = Path(work) / "peak"
        started = time.perf_counter()
        proc = subprocess.run([sys.executable, "-c", PEAK, str(report), code],
                              stdout=subprocess.DEVNULL)  # fmt: skip
        seconds = time.perf_counter() - started
        if proc.returncode:
            raise SystemExit(f"{code} failed ({proc.returncode})")
        return seconds, int(report.read_text()) / 1024


def translation(folder: Path, out: Path, sentences: list[str], rounds: int) -> list[dict]:
    """Ours and MarianMTModel.generate on ``sentences``, greedy and beam 4, interleaved."""
    from transformers import MarianMTModel, MarianTokenizer

    hf = MarianMTModel.from_pretrained(folder).eval()
    tokenizer = MarianTokenizer.from_pretrained(folder)
    ours = load_checkpoint(out).model
    # as `transformer translate` runs it: linear layers packed for oneDNN, a batch per thread
    pack_for_translation(ours)
    threads = decode_threads(RuntimeConfig(threads=torch.get_num_threads()), torch.device("cpu"))
    tokenizers = Tokenizers.load(out, read_config(out).model.vocab_sizes)
    ids = [encode_source(tokenizers.src.encode(s)) for s in sentences]
    order = sorted(range(len(sentences)), key=lambda i: len(ids[i]))
    pieces = tokenizers.tgt.vocabulary()
    rows = []
    for name, beams in (("greedy", 1), ("beam 4", 4)):
        decode = DecodeConfig(beam_size=beams, length_penalty=0.0, max_len_a=0.0,
                              max_len_b=LIMIT, batch_size=64)  # fmt: skip

        def run_ours(decode: DecodeConfig = decode) -> list[list[str]]:
            found = translate_ids(ours, ids, decode, threads=threads)
            return [[pieces[i] for i in h[0].tokens] for h in found]

        def run_hf(beams: int = beams) -> list[list[str]]:
            found: dict[int, list[str]] = {}
            for k in range(0, len(order), 64):
                chunk = order[k : k + 64]
                batch = tokenizer([sentences[i] for i in chunk], return_tensors="pt",
                                  padding=True)  # fmt: skip
                with torch.inference_mode():
                    out_ids = hf.generate(**batch, num_beams=beams, do_sample=False,
                                          length_penalty=0.0, max_new_tokens=LIMIT + 1,
                                          bad_words_ids=[[VOCAB - 1]])  # fmt: skip
                for i, seq in zip(chunk, out_ids.tolist(), strict=True):
                    kept = [t for t in seq[1:] if t not in (0, VOCAB - 1)]  # start, </s>, pad
                    found[i] = tokenizer.convert_ids_to_tokens(kept)
            return [found[i] for i in range(len(sentences))]

        best = {"ours": float("inf"), "hf": float("inf")}
        outputs: dict[str, list[list[str]]] = {}
        for _ in range(rounds):  # alternating: a burst of load slows one pass, not one engine
            for engine, run in (("ours", run_ours), ("hf", run_hf)):
                started = time.perf_counter()
                outputs[engine] = run()
                best[engine] = min(best[engine], time.perf_counter() - started)
        pairs = zip(outputs["ours"], outputs["hf"], strict=True)
        rows.append({"search": name, "ours_s": best["ours"], "hf_s": best["hf"],
                     "same": sum(a == b for a, b in pairs),
                     "tokens": sum(len(t) + 1 for t in outputs["ours"])})  # fmt: skip
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sentences", type=int, default=500, help="0: the import only")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--markdown", help="write the tables here")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="import-marian-") as work:
        folder, out = Path(work) / "opus-mt-sized", Path(work) / "imported"
        build(folder)
        size_mb = (folder / "model.safetensors").stat().st_size / 2**20
        base_s, base_mb = child("import torch, transformer.hub.marian_import")
        command = ["transformer", "import", str(folder), str(out)]
        run = "runpy.run_module('transformer', run_name='__main__')"  # python -m transformer
        import_s, import_mb = child(f"import runpy, sys; sys.argv = {command!r}; {run}")
        sentences = lines("test_2016_flickr.en.gz")[: args.sentences]
        rows = translation(folder, out, sentences, args.rounds) if sentences else []
    load_after = os.getloadavg()
    own = import_mb - base_mb
    text = [
        f"`python benchmarks/import_marian.py --sentences {args.sentences} --rounds "
        f"{args.rounds} --threads {args.threads}`",
        "",
        f"{time.strftime('%Y-%m-%d %H:%M')}; {os.cpu_count()} cores; load average (1, 5, 15 min) "
        f"{', '.join(f'{x:.1f}' for x in load_before)} before, "
        f"{', '.join(f'{x:.1f}' for x in load_after)} after; torch {torch.__version__}, "
        f"transformers {__import__('transformers').__version__}.",
        "",
        "| import of a random opus-mt-sized model (74 M parameters) | measured | target |",
        "|---|---|---|",
        f"| weights file (float32) | {size_mb:,.0f} MB | |",
        f"| `transformer import`, wall time (process start included) | {import_s:.1f} s | ≤ 30 s |",
        f"| a process importing only torch and the package | {base_s:.1f} s | |",
        f"| peak resident memory of the import | {import_mb:,.0f} MB | |",
        f"| its own part (above that process's {base_mb:,.0f} MB) | {own:,.0f} MB = "
        f"{own / size_mb:.2f}× the weights | ≤ 2× |",
        "",
        f"| search, {args.sentences} sentences, {args.threads} threads | ours (s) | "
        "MarianMTModel.generate (s) | ours faster by | same tokens | output tokens |",
        "|---|---|---|---|---|---|",
    ]
    if not rows:
        text = text[:-3]
    for r in rows:
        text.append(f"| {r['search']} | {r['ours_s']:.1f} | {r['hf_s']:.1f} | "
                    f"{r['hf_s'] / r['ours_s']:.2f}× | {r['same']}/{args.sentences} | "
                    f"{r['tokens']:,} |")  # fmt: skip
    print("\n".join(text))
    if args.markdown:
        Path(args.markdown).write_text("\n".join(text) + "\n")


if __name__ == "__main__":
    main()
