"""The notes' sentence and 20 everyday French sentences through a French->English model.

    .venv/bin/python benchmarks/french_examples.py RUN --data_dir ../shared/data

For each sentence it says where the sentence stands in the Tatoeba corpus (after lowercasing and
collapsing spaces, the rule the split uses): ``train``, ``valid``, ``test``, or ``unseen`` when no
French side of the corpus is the same sentence. It then translates all of them with
``transformer translate RUN`` (the run's own decode settings) and prints a Markdown table of what
came out, right or wrong, with the corpus' own English translations where there are some.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

from transformer.config import load_config
from transformer.data.readers import iter_tsv_pairs
from transformer.data.splits import SplitPlan, normalised, plan_split

# The notes walk "Je suis étudiant" through the Transformer; the rest are everyday sentences,
# written for this table, which the corpus does not contain (the script checks).
NOTES = ["Je suis étudiant."]
EVERYDAY = [
    "Il fait très froid ce matin.",
    "Où se trouve la boulangerie la plus proche du musée ?",
    "Ma sœur travaille dans un hôpital.",
    "Nous avons mangé une pizza hier soir.",
    "Peux-tu fermer la fenêtre de la cuisine ?",
    "Le train pour Lyon part à huit heures.",
    "J'ai oublié mon parapluie au bureau.",
    "Les enfants jouent dans le jardin.",
    "Je voudrais un café sans sucre.",
    "Cette voiture est trop chère pour moi.",
    "Il a plu toute la journée hier.",
    "Mon frère apprend à nager cet été.",
    "Elle lit un livre sur l'histoire de France.",
    "Nous partons en vacances la semaine prochaine.",
    "Je ne comprends pas cette règle de grammaire.",
    "Le chat dort sur le canapé du salon.",
    "Combien coûte ce billet de train ?",
    "Ils ont acheté une nouvelle maison à la campagne.",
    "J'aime écouter de la musique le soir.",
    "La réunion de demain a été annulée.",
]


def where(sentences: list[str], pairs: list[tuple[str, str]], plan: SplitPlan) -> list[str]:
    names = ("train", "valid", "test")
    split_of = {normalised(fr): names[plan.split_of((fr, en))] for fr, en in pairs}
    return [split_of.get(normalised(s), "unseen") for s in sentences]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("run", type=Path)
    parser.add_argument("--data_dir", type=Path, required=True)
    parser.add_argument("--config", default="tatoeba-fr-en", help="the run's config (its split)")
    args = parser.parse_args()

    config = load_config(args.config)
    # The reader and the split of the training run itself: (French, English) pairs.
    pairs = list(iter_tsv_pairs(args.data_dir / "tatoeba" / "fra-eng.zip", first_is_source=False))
    data = config.data
    fractions = data.valid_fraction, data.test_fraction
    plan = plan_split(pairs, *fractions, data.split_seed, by_source=True)
    sentences = NOTES + EVERYDAY
    places = where(sentences, pairs, plan)
    references = defaultdict(list)
    for fr, en in pairs:
        references[normalised(fr)].append(en)

    binary = Path(sys.executable).with_name("transformer")
    done = subprocess.run(
        [str(binary), "translate", str(args.run)],
        input="\n".join(sentences) + "\n", capture_output=True, text=True, check=True,
    )  # fmt: skip
    outputs = done.stdout.splitlines()
    print("| French | in the corpus | our translation | the corpus' translations |")
    print("|---|---|---|---|")
    for sentence, place, output in zip(sentences, places, outputs, strict=True):
        refs = " / ".join(sorted(set(references.get(normalised(sentence), [])))) or "–"
        print(f"| {sentence} | {place} | {output} | {refs} |")


if __name__ == "__main__":
    main()
