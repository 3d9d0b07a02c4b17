"""What many test files need: the command line in-process and as a child process, a tiny random
model, a tiny number-words run's options and the config they make, a checkpoint's weights,

a stub model whose next-token distributions are set by hand (so a search's best answer is known
by construction), the copy task's sentences, and where the shared data is.

Import from here (``from helpers import cli, tiny_model``); ``conftest.py`` holds the fixtures.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import random
import subprocess
import sys
import warnings
from contextlib import contextmanager, redirect_stderr, redirect_stdout
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from torch import Tensor, nn

from transformer.cli import main
from transformer.config import DecodeConfig, ModelConfig, RunConfig, load_config, sectioned
from transformer.inference import greedy_search
from transformer.inference.beam import beam_search
from transformer.inference.translation import translate
from transformer.model import AttentionMaps, EncoderDecoder, Transformer, build_model
from transformer.model.masks import padding_mask
from transformer.vocab import BOS_ID, EOS_ID, PAD_ID

# ../shared/data next to the checkout: Multi30k and the Tatoeba zips (never committed). Tests
# that need them skip, saying so, when the folder is missing.
SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"

# A tiny en->fr number-words run: a few thousand parameters, seconds per run on a CPU.
TINY_NUMBERS = [
    "--preset", "tiny", "--corpus", "numbers", "--numbers_max", "999", "--numbers_train", "400",
    "--numbers_valid", "20", "--numbers_test", "30", "--vocab_size", "80", "--max_tokens", "800",
    "--warmup_steps", "10", "--max_positions", "48",
]  # fmt: skip


def train_config(options: list[str]) -> RunConfig:
    """The config that ``transformer train OPTIONS`` trains, built the way a Python caller builds
    one (``load_config`` of ``sectioned`` keys): OPTIONS are ``--key value`` pairs, keys named as
    on the command line (``--max_steps``, ``--train.max_steps``), each value read as JSON where
    it is one (numbers, true, false, null), else as text; ``--config FILE`` is the base."""
    keys: dict[str, object] = {}
    args = list(options)
    while args:
        key, value = args.pop(0).removeprefix("--").replace("-", "_"), args.pop(0)
        try:
            keys[key] = json.loads(value)
        except json.JSONDecodeError:
            keys[key] = value
    return load_config(keys.pop("config", None), sectioned(keys))


# The copy task (the ``copy_model`` fixture): 12 words, each one SentencePiece piece.
COPY_WORDS = ["ka", "lo", "mi", "nu", "pe", "ri", "so", "tu", "va", "ze", "bo", "fi"]


def copy_sentences(n: int, seed: int, repeats: bool = False) -> list[str]:
    """Sentences of 3-7 words of COPY_WORDS; without ``repeats`` no word twice (attention that
    follows the content cannot tell two copies of a word apart, so only such sentences have
    one right alignment)."""
    rng = random.Random(seed)
    if repeats:
        return [" ".join(rng.choices(COPY_WORDS, k=rng.randint(3, 7))) for _ in range(n)]
    return [" ".join(rng.sample(COPY_WORDS, rng.randint(3, 7))) for _ in range(n)]


def cli(
    args: list[str], capsys, stdin: str | None = None, monkeypatch=None
) -> tuple[int, str, str]:
    """``transformer ARGS`` in this process: (exit code, stdout, stderr). ``stdin`` needs
    ``monkeypatch`` to replace standard input."""
    if stdin is not None:
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin.encode())))
    code = main(args)
    out, err = capsys.readouterr()
    return code, out, err


@dataclass
class Result:
    code: int
    stdout: str
    stderr: list[str]  # lines


def cli_process(*args: str, stdin: str | bytes | None = None, script: str | None = None,
                timeout: float = 300) -> Result:  # fmt: skip
    """``python -m transformer ARGS`` in a child process, as a user runs it (``script``: Python
    code run with ``-c`` instead of ``-m transformer``)."""
    command = [sys.executable, "-c", script, *args] if script else [
        sys.executable, "-m", "transformer", *args
    ]  # fmt: skip
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.pop("TRANSFORMER_DEBUG", None)
    data = stdin.encode() if isinstance(stdin, str) else stdin
    done = subprocess.run(command, input=data, capture_output=True, env=env, timeout=timeout)
    stderr = done.stderr.decode(errors="replace").splitlines()
    return Result(done.returncode, done.stdout.decode(errors="replace"), stderr)


def command_process(args: list[str], before: str = "", after: str = "") -> Result:
    """``transformer ARGS`` as the command runs it (``__main__.run``), in a child process
    (``cli_process``), with Python code ``before`` it starts and ``after`` it returns (``code``
    holds its exit code)."""
    script = (
        f"import sys\n{before}\nsys.argv[0] = 'transformer'\n"
        f"from transformer.__main__ import run\ncode = run()\n{after}\nsys.exit(code)\n"
    )
    return cli_process(*args, script=script, timeout=120)


def imported_by_command(args: list[str], modules: tuple[str, ...]) -> tuple[Result, list[str]]:
    """``transformer ARGS`` in a child process (``command_process``): its result, and which of
    ``modules`` it had imported by its end."""
    late = f"[m for m in {modules!r} if m in sys.modules]"
    result = command_process(args, after=f"print('imported:', *{late}, file=sys.stderr)")
    last = result.stderr[-1] if result.stderr else ""
    assert last.startswith("imported:"), result.stderr
    return result, last.split()[1:]


def cli_main(*args: str, stdin: str | bytes | None = None) -> Result:
    """``transformer ARGS`` in this process, seen as ``cli_process`` sees it, without a child's
    start-up (seconds each): ``stdin`` is standard input (bytes as they are, so that invalid
    UTF-8 reaches the reader), the output is captured, and Python's warnings are lines on
    stderr, filtered as a child filters them. torch's thread count is put back after
    (``--runtime.threads``). For what needs a process of its own (signals, kill -9, a terminal,
    a pipe), use ``cli_process``."""
    out, err, threads = io.StringIO(), io.StringIO(), torch.get_num_threads()
    data = stdin.encode() if isinstance(stdin, str) else (stdin or b"")
    reader = io.TextIOWrapper(io.BytesIO(data), encoding="utf-8")
    saved = sys.stdin
    try:
        sys.stdin = reader
        with redirect_stdout(out), redirect_stderr(err), warnings.catch_warnings(record=True) as w:
            for category in _IGNORED_WARNINGS:  # a child's default filters (python -W help)
                warnings.simplefilter("ignore", category)
            code = main(list(args))
    finally:
        sys.stdin = saved
        torch.set_num_threads(threads)
    lines = err.getvalue().splitlines()
    lines += [f"{x.filename}:{x.lineno}: {x.category.__name__}: {x.message}" for x in w]
    return Result(code, out.getvalue(), lines)


_IGNORED_WARNINGS = (DeprecationWarning, PendingDeprecationWarning, ImportWarning, ResourceWarning)


def one_line_error(result: Result, code: int, *needles: str) -> str:
    """Asserts the exit code and a single stderr line, with no traceback, holding ``needles``."""
    assert result.code == code, (result.code, result.stderr)
    assert len(result.stderr) == 1, result.stderr
    line = result.stderr[0]
    assert "Traceback" not in line
    for needle in needles:
        assert needle in line, (needle, line)
    return line


def snapshot(folder: Path) -> dict[str, str]:
    """SHA-256 of every file under ``folder`` (the flock file ``.lock`` aside: it is ours)."""
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and p.name != ".lock"
    }


def tiny_model(src_vocab: int = 40, tgt_vocab: int = 30, **overrides) -> Transformer:
    """A random ``tiny`` Transformer (seed 0, eval mode) with the given vocabulary sizes."""
    torch.manual_seed(0)
    config = ModelConfig.preset(
        "tiny", src_vocab_size=src_vocab, tgt_vocab_size=tgt_vocab, **overrides
    )
    return Transformer(config).eval()


def tiny_rnn(cell="gru", attention="bahdanau", src_vocab=40, tgt_vocab=30, **overrides):
    """A random two-layer RNN encoder-decoder (seed 0, eval mode, no dropout, untied output)."""
    torch.manual_seed(0)
    fields = {"src_vocab_size": src_vocab, "tgt_vocab_size": tgt_vocab, "tie_output": False,
              **overrides}  # fmt: skip
    config = ModelConfig(
        architecture="rnn", rnn_cell=cell, rnn_attention=attention, rnn_hidden=16,
        rnn_embedding=12, rnn_layers=2, rnn_dropout=0.0, **fields,
    )  # fmt: skip
    return build_model(config).eval()


# Every EncoderDecoder the searches take, by name (random, seed 0, eval mode, vocabularies 40
# and 30): the Transformer post- and pre-norm, the RNN's cells without and with attention.
ENCODER_DECODERS = {
    "post": lambda: tiny_model(),
    "pre": lambda: tiny_model(norm_first=True, positional="learned"),
    **{f"{cell}-{attention}": partial(tiny_rnn, cell, attention)
       for cell, attention in [("gru", "none"), ("gru", "bahdanau"), ("lstm", "luong"),
                               ("lstm", "bahdanau")]},
}  # fmt: skip


def padded(sentences: list[list[int]]) -> Tensor:
    """Source id lists as one right-padded (B, S) batch."""
    width = max(len(s) for s in sentences)
    return torch.tensor([s + [PAD_ID] * (width - len(s)) for s in sentences])


def four_searches(model: EncoderDecoder, search: str) -> list[list]:
    """Greedy search (its one hypothesis) or beam search (beam 4, the 3 best) over four sources
    of different lengths, up to 12 tokens each: hypotheses per sentence, best first."""
    src = padded([[5, 6, 7, 8, 9, 3], [10, 11, 3], [12, 13, 14, 15, 16, 17, 18, 19, 3], [20, 3]])
    config = DecodeConfig(beam_size=4, nbest=3, max_len_b=12)
    if search == "greedy":
        return [[h] for h in greedy_search(model, src, config)]
    return beam_search(model, src, config)


def weights(folder: Path) -> dict[str, torch.Tensor]:
    """The tensors of a checkpoint folder's ``model.safetensors``."""
    return load_file(str(Path(folder) / "model.safetensors"))


# --- a stub model with hand-set distributions -----------------------------------------------
A, B, C, D, X, Y, Z = 4, 5, 6, 7, 8, 9, 10  # target tokens of the stub (vocabulary 12)


class StubCache:
    """Remembers each row's prefix, as a DecoderCache remembers keys and values."""

    def __init__(self) -> None:
        self.prefix: Tensor | None = None

    def reorder(self, index: Tensor) -> None:
        assert self.prefix is not None
        self.prefix = self.prefix.index_select(0, index)

    def keep(self, index: Tensor, sentences: Tensor) -> None:
        self.reorder(index)


class Stub(EncoderDecoder):
    """P(next | prefix) = table[prefix without BOS], else ``default``, whatever the source: an
    EncoderDecoder whose decoder output is already the log-probabilities (``output`` passes them
    on), with no attention and no parameters."""

    width, alignment_layer, attention_kinds, encodes_positions = 12, 0, (), False
    name = summary = "a stub with hand-set distributions"

    def __init__(self, table: dict[tuple, dict[int, float]], default=None) -> None:
        super().__init__()
        self.config = ModelConfig(src_vocab_size=12, tgt_vocab_size=12)
        self.output = nn.Identity()
        self.table, self.default = table, default or {EOS_ID: 1.0}
        self.rows_seen: list[int] = []  # batch rows of every decode call

    def encode(self, src_ids: Tensor) -> tuple[Tensor, Tensor]:
        return src_ids[:, :, None].float(), padding_mask(src_ids)

    def new_cache(self, length: int = 0) -> StubCache:
        return StubCache()

    def decode_hidden(self, tgt_ids, memory, src_mask, cache=None) -> Tensor:
        assert memory.size(0) == tgt_ids.size(0) == src_mask.size(0)
        self.rows_seen.append(tgt_ids.size(0))
        new = tgt_ids.size(1)
        if cache is not None:
            assert new == 1, "incremental decoding feeds one new token"
            prev = cache.prefix
            cache.prefix = tgt_ids if prev is None else torch.cat([prev, tgt_ids], dim=1)
            tgt_ids = cache.prefix
        assert (tgt_ids[:, 0] == BOS_ID).all()
        logits = [
            [self._logits(tuple(ids[1 : t + 1])) for t in range(len(ids))]
            for ids in tgt_ids.tolist()
        ]
        return torch.tensor(logits)[:, -new:]  # (B, new, 12)

    def _logits(self, prefix: tuple) -> list[float]:
        probs = torch.zeros(12)
        for token, p in self.table.get(prefix, self.default).items():
            probs[token] = p
        return probs.log().tolist()

    def decode_aligned(self, tgt_ids, memory, src_mask, cache=None) -> tuple[Tensor, Tensor]:
        raise NotImplementedError("the stub has no attention")

    def attention_maps(self, src_ids: Tensor, tgt_ids: Tensor) -> AttentionMaps:
        raise NotImplementedError("the stub has no attention")

    def parts(self) -> list[tuple[str, list[nn.Module]]]:
        return []

    def once_per_batch(self) -> list[nn.Module]:
        return []


# --- the HTTP service -----------------------------------------------------------------------
@contextmanager
def client_for(engine, **limits):
    """A FastAPI TestClient of the service on ``engine`` with ``limits`` (ServeConfig fields)."""
    from fastapi.testclient import TestClient

    from transformer.serve.app import create_app
    from transformer.serve.config import ServeConfig

    with TestClient(create_app(engine, ServeConfig(**limits))) as client:
        yield client


def expected(engine, sentences, **search):
    """What the library (no server, no batching across requests) gives for ``sentences``."""
    decode = replace(engine.decode, **search)
    return translate(engine.model, engine.tokenizers, sentences, decode).nbest


def assert_served(answer: dict, nbest) -> None:
    """A /translate answer holds the texts and scores of ``nbest`` (the library's)."""
    assert [t["text"] for t in answer["translations"]] == [n[0].text for n in nbest]
    for got, want in zip(answer["translations"], nbest, strict=True):
        assert [h["text"] for h in got["nbest"]] == [h.text for h in want]
        assert [h["score"] for h in got["nbest"]] == pytest.approx(
            [h.score for h in want], abs=1e-4
        )


def assert_error(response, status: int, code: str, *words: str) -> dict:
    """A JSON error of exactly {error, message}: one line, no traceback, naming ``words``."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/json"
    body = response.json()
    assert set(body) == {"error", "message"} and body["error"] == code
    assert "\n" not in body["message"] and "Traceback" not in response.text
    for word in words:
        assert word in body["message"]
    return body


def random_model(seed: int = 0, tgt_vocab: int = 30):
    """A random model whose outputs vary with the source and sometimes end early (a default
    random Transformer repeats one token forever)."""
    model = tiny_model(40, tgt_vocab, dropout=0.0, norm_first=True, positional="learned",
                       tie_output=False)  # fmt: skip
    torch.manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() > 1:
                p.normal_(0.0, 1.0)
        model.output.weight[EOS_ID] *= 1.5
    return model
