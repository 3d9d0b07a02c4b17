"""What a glossary costs and gives, on a trained model's own test split (beam search, torch engine).

    .venv/bin/python benchmarks/glossary.py --model runs/numbers-en-fr
    .venv/bin/python benchmarks/glossary.py --model runs/numbers-en-fr --terms my.tsv --beam 4

Splits the test sentences into those holding a glossary source term and those without, then
reports:
- the share of the target terms present in the translations (each occurrence of a source term
  needs its target term once, matched on word boundaries in the output text), without and with
  the glossary;
- BLEU (sacreBLEU) of the term-free sentences without and with the glossary, and how many of
  their translations are byte-identical (they should all be: without terms the search is plain
  beam search);
- speed: sentences per second on each part, without and with the glossary; each timing is the
  fastest of ``--rounds`` passes, on a machine other work may share.

The default glossary is Belgian and Swiss French for the number-words model: seventy ->
septante, ninety -> nonante.
"""

from __future__ import annotations

import argparse
import re
import time
from pathlib import Path

import torch

from transformer.data.corpora import load_splits
from transformer.inference.engine import load_torch_engine
from transformer.inference.evaluate import score_translations
from transformer.inference.glossary import Glossary

DEFAULT_TERMS = [("seventy", "septante"), ("ninety", "nonante")]


def timed(translate, sentences: list[str], rounds: int) -> tuple[list[str], float]:
    """(the best translations, the fastest pass in seconds)."""
    fastest, best = float("inf"), []
    for _ in range(rounds):
        start = time.perf_counter()
        best = translate(sentences).best
        fastest = min(fastest, time.perf_counter() - start)
    return best, fastest


def present(glossary: Glossary, sources: list[str], outputs: list[str]) -> tuple[int, int]:
    """(target terms present, target terms needed) over the sentences."""
    found = needed = 0
    for source, output in zip(sources, outputs, strict=True):
        wanted = glossary.targets_in(source)
        for term in set(wanted):
            count = len(re.findall(rf"(?<!\w){re.escape(term)}(?!\w)", output))
            found += min(count, wanted.count(term))
        needed += len(wanted)
    return found, needed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="a trained model directory")
    parser.add_argument("--terms", help="a glossary file (default: seventy/ninety, Belgian)")
    parser.add_argument("--beam", type=int, default=4, help="beam size")
    parser.add_argument("--limit", type=int, default=1000, help="test sentences at most")
    parser.add_argument("--rounds", type=int, default=2, help="timed passes; the fastest counts")
    parser.add_argument("--out", help="also write the table to this Markdown file")
    args = parser.parse_args()

    torch.set_num_threads(2)
    engine = load_torch_engine(args.model, beam_size=args.beam)
    glossary = Glossary.read(args.terms) if args.terms else Glossary.of(DEFAULT_TERMS)
    pairs = load_splits(engine.config.data).test[: args.limit]
    with_terms = [(s, t) for s, t in pairs if glossary.targets_in(s)]
    without = [(s, t) for s, t in pairs if not glossary.targets_in(s)]
    plain = engine.translate

    def constrained(sentences: list[str]):
        return engine.translate(sentences, glossary=glossary)

    rows, outputs = [], {}
    for part, chosen in (("with terms", with_terms), ("without terms", without)):
        sources = [s for s, _ in chosen]
        for name, translate in (("plain", plain), ("glossary", constrained)):
            best, seconds = timed(translate, sources, args.rounds)
            outputs[part, name] = best
            rows.append((part, name, len(sources), seconds))

    terms_sources = [s for s, _ in with_terms]
    free_refs = [t for _, t in without]
    lines = [
        f"model: {args.model}; beam {args.beam}; glossary: "
        + ", ".join(f"{t.source} -> {t.target}" for t in glossary.terms)
        + f"; {len(pairs)} test sentences, {len(with_terms)} with a term",
        "",
        "| part | search | sentences | seconds | sentences/s |",
        "|---|---|---|---|---|",
    ]
    lines += [f"| {p} | {n} | {k} | {s:.2f} | {k / s:.1f} |" for p, n, k, s in rows]
    lines.append("")
    for name in ("plain", "glossary"):
        found, needed = present(glossary, terms_sources, outputs["with terms", name])
        share = 100 * found / max(needed, 1)
        lines.append(f"- target terms present, {name}: {found} of {needed} ({share:.1f}%)")
    for name in ("plain", "glossary"):
        bleu = score_translations(outputs["without terms", name], free_refs)[0]
        lines.append(f"- term-free sentences, {name}: {bleu}")
    same = sum(a == b for a, b in zip(*(outputs["without terms", n] for n in ("plain", "glossary")),
                                      strict=True))  # fmt: skip
    lines.append(f"- term-free translations identical with and without: {same} of {len(without)}")
    cost = [rows[1][3] / rows[0][3], rows[3][3] / rows[2][3]]
    lines.append(f"- time with the glossary / without: {cost[0]:.2f}x on the sentences with "
                 f"terms, {cost[1]:.2f}x on those without")  # fmt: skip
    lines += ["", "Sentences with terms (source | plain | glossary):", ""]
    for i, source in enumerate(terms_sources[:12]):
        lines.append(f"    {source} | {outputs['with terms', 'plain'][i]} | "
                     f"{outputs['with terms', 'glossary'][i]}")  # fmt: skip
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        Path(args.out).write_text(text, encoding="utf-8")


if __name__ == "__main__":
    main()
