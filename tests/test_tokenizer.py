"""SentencePiece tokenizers: fixed special ids, round trips, save/load, joint vs separate."""

import io
import shutil
from dataclasses import replace
from pathlib import Path

import pytest
import sentencepiece as spm

from transformer.config import DataConfig
from transformer.data import read_parallel
from transformer.data.tokenizer import Tokenizer, Tokenizers
from transformer.errors import UserError
from transformer.vocab import BOS_ID, EOS_ID, PAD_ID, UNK_ID

from helpers import SHARED_DATA, cli_process

ENGLISH = [
    "the cat sat on the mat.",
    "a young girl is playing with her dog in the park.",
    "two men are working on a red car.",
    "seven hundred and seventy-one people are waiting for the train.",
    "she reads a book while he cooks dinner.",
]
FRENCH = [
    "le chat était assis sur le tapis.",
    "une jeune fille joue avec son chien dans le parc.",
    "deux hommes travaillent sur une voiture rouge.",
    "sept cent soixante et onze personnes attendent le train.",
    "elle lit un livre pendant qu'il prépare le dîner.",
]
PAIRS = list(zip(ENGLISH, FRENCH, strict=True)) * 20
DATA = DataConfig(vocab_size=120)


def trained(pairs, data, model_dir):
    """Tokenizers trained and saved into model_dir/tokenizer."""
    tokenizers = Tokenizers.train(pairs, data)
    tokenizers.save(model_dir)
    return tokenizers


@pytest.fixture(scope="module", params=["bpe", "unigram"])
def joint(request, tmp_path_factory):
    """(tokenizers, model_dir, data) of a joint model of each kind, trained once."""
    data = replace(DATA, tokenizer=request.param)
    model_dir = tmp_path_factory.mktemp(request.param)
    return trained(PAIRS, data, model_dir), model_dir, data


def test_special_ids_are_fixed(joint):
    tokenizers, _, _ = joint
    pieces = [tokenizers.src.id_to_piece(i) for i in (PAD_ID, UNK_ID, BOS_ID, EOS_ID)]
    assert pieces == ["<pad>", "<unk>", "<s>", "</s>"]


def test_encode_decode_round_trip(joint):
    tokenizers, _, _ = joint
    for sentence in ENGLISH + FRENCH:
        ids = tokenizers.src.encode(sentence)
        assert ids and min(ids) > EOS_ID  # no specials, and every character known
        assert tokenizers.tgt.decode(ids) == sentence
    assert tokenizers.src.encode_batch(ENGLISH[:2]) == [
        tokenizers.src.encode(s) for s in ENGLISH[:2]
    ]


def test_decode_ignores_pad_bos_eos_and_shows_unknowns(joint):
    tokenizers, _, _ = joint
    ids = tokenizers.tgt.encode("le chat")
    assert tokenizers.tgt.decode([BOS_ID, *ids, EOS_ID, PAD_ID, PAD_ID]) == "le chat"
    assert "le chat" in tokenizers.tgt.decode([*ids, UNK_ID]) != "le chat"
    assert "".join(tokenizers.src.pieces("the cat")).replace("▁", " ").strip() == "the cat"


def test_save_and_load_give_identical_ids(joint):
    tokenizers, model_dir, _ = joint
    assert sorted(p.name for p in (model_dir / "tokenizer").iterdir()) == ["joint.model"]
    loaded = Tokenizers.load(model_dir, (tokenizers.src.vocab_size,) * 2)
    assert loaded.joint and loaded.src.vocab_size == tokenizers.src.vocab_size
    for sentence in ENGLISH + FRENCH + ["an unseen sentence, with Ünïcödé!"]:
        assert loaded.src.encode(sentence) == tokenizers.src.encode(sentence)
        assert loaded.tgt.encode(sentence) == tokenizers.tgt.encode(sentence)


def test_training_is_deterministic(joint):
    tokenizers, _, data = joint
    again = Tokenizers.train(PAIRS, data)
    assert again.src.model == tokenizers.src.model


def test_bpe_and_unigram_are_different_models():
    # BPE scores pieces by merge order (integers); unigram by log-probability.
    bpe = Tokenizers.train(PAIRS, replace(DATA, tokenizer="bpe")).src
    unigram = Tokenizers.train(PAIRS, replace(DATA, tokenizer="unigram")).src
    scores = [[t.processor.get_score(i) for i in range(4, t.vocab_size)] for t in (bpe, unigram)]
    assert all(score.is_integer() for score in scores[0])
    assert not all(score.is_integer() for score in scores[1])


def test_separate_vocabularies(tmp_path):
    tokenizers = trained(PAIRS, replace(DATA, joint_vocab=False), tmp_path)
    assert not tokenizers.joint
    assert sorted(p.name for p in (tmp_path / "tokenizer").iterdir()) == ["src.model", "tgt.model"]
    assert UNK_ID in tokenizers.src.encode("dîner")  # î only occurs on the French side
    assert UNK_ID not in tokenizers.tgt.encode("dîner")
    loaded = Tokenizers.load(tmp_path, (tokenizers.src.vocab_size, tokenizers.tgt.vocab_size))
    assert loaded.tgt.encode(FRENCH[4]) == tokenizers.tgt.encode(FRENCH[4])
    # Retraining with a joint vocabulary replaces both files.
    trained(PAIRS, DATA, tmp_path)
    assert sorted(p.name for p in (tmp_path / "tokenizer").iterdir()) == ["joint.model"]


def test_too_large_vocab_gives_a_smaller_one_quietly(capfd):
    tokenizers = Tokenizers.train(PAIRS, replace(DATA, vocab_size=8000))
    assert 40 < tokenizers.src.vocab_size < 8000
    assert capfd.readouterr().err == ""  # no SentencePiece log on stderr


def test_too_small_vocab_is_a_clear_error_naming_the_size_the_characters_need():
    # one piece per distinct character, one for the word boundary ▁, and the 4 special pieces
    characters = {c for src, tgt in PAIRS for c in src + tgt if c != " "}
    needed = len(characters) + 1 + 4
    expected = rf"vocab_size=10 .* need {needed} pieces .* least {needed}, or lower data.char"
    with pytest.raises(UserError, match=expected):
        Tokenizers.train(PAIRS, replace(DATA, vocab_size=10))
    assert Tokenizers.train(PAIRS, replace(DATA, vocab_size=needed)).src.vocab_size >= needed


@pytest.mark.parametrize(("field", "value"), [("vocab_size", 4), ("character_coverage", 0.9)])
def test_values_sentencepiece_refuses_are_refused_by_the_config(field, value):
    # SentencePiece's own refusals were its C++ condition ("insert_id(...)", "coverage >= 0.98")
    with pytest.raises(ValueError, match=f"DataConfig.{field} must be"):
        replace(DATA, **{field: value})
    with pytest.raises(RuntimeError, match="trainer_interface"):  # why: SentencePiece's range
        spm.SentencePieceTrainer.train(
            sentence_iterator=iter(ENGLISH),
            model_writer=io.BytesIO(),
            minloglevel=2,
            **{"vocab_size": 30, "character_coverage": 1.0, field: value},
        )


def test_load_errors_name_the_folder_or_file(tmp_path):
    with pytest.raises(UserError, match=r"no tokenizer in .*tokenizer: expected joint.model"):
        Tokenizers.load(tmp_path, (8, 8))
    (tmp_path / "tokenizer").mkdir()
    (tmp_path / "tokenizer" / "joint.model").write_bytes(b"not a model")
    with pytest.raises(UserError, match=r"joint\.model: not a SentencePiece model"):
        Tokenizers.load(tmp_path, (8, 8))
    with pytest.raises(UserError, match="file not found"):
        Tokenizer.load(tmp_path / "missing.model")


def test_model_with_other_special_ids_is_refused(tmp_path):
    model = io.BytesIO()  # SentencePiece's defaults: unk 0, bos 1, eos 2, no pad
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(ENGLISH), model_writer=model, vocab_size=40, minloglevel=2
    )
    (tmp_path / "other.model").write_bytes(model.getvalue())
    with pytest.raises(UserError, match=r"other\.model: special ids must be .*got \{0: '<unk>'"):
        Tokenizer.load(tmp_path / "other.model")


@pytest.mark.skipif(not SHARED_DATA.is_dir(), reason=f"real corpora not found in {SHARED_DATA}")
def test_joint_bpe_8000_on_multi30k():
    folder = SHARED_DATA / "multi30k"
    train = read_parallel(folder / "train.de.gz", folder / "train.en.gz")
    tokenizers = Tokenizers.train(train, DataConfig(vocab_size=8000))
    assert tokenizers.src.vocab_size == 8000
    for de, en in read_parallel(folder / "val.de.gz", folder / "val.en.gz")[:100]:
        assert tokenizers.src.decode(tokenizers.src.encode(de)) == " ".join(de.split())
        assert tokenizers.tgt.decode(tokenizers.tgt.encode(en)) == " ".join(en.split())


def test_an_empty_tokenizer_file_is_one_line(numbers_model, tmp_path):
    """SentencePiece takes no bytes as no model at all: a model directory whose tokenizer file
    was empty printed three lines of SentencePiece's log on stderr above the error."""
    model = Path(shutil.copytree(numbers_model, tmp_path / "M", ignore=shutil.ignore_patterns(
        "data", ".lock", "trainer.pt")))  # fmt: skip
    (empty,) = list((model / "tokenizer").glob("*.model"))[:1]
    empty.write_bytes(b"")
    result = cli_process("translate", str(model), stdin="twelve\n")
    assert result.code == 2 and len(result.stderr) == 1, result
    assert f"{empty.name}: empty, not a SentencePiece model" in result.stderr[0], result
