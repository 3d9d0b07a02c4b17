"""Batches decoded at once (inference/parallel.py, ``runtime.inter_threads``): the same outputs
as one batch at a time, the caller's autocast in every worker, torch's threads restored."""

import sys
import threading
import time
from dataclasses import replace

import pytest
import torch

from transformer.config import DecodeConfig, ModelConfig, RuntimeConfig
from transformer.device import prepare_runtime
from transformer.errors import UserError
from transformer.inference import translate_ids
from transformer.inference.parallel import DecodeThreads, decode_threads, map_batches
from transformer.inference.translation import in_length_batches

from helpers import tiny_model

SENTENCES = [[4 + (i * 7 + j) % 30 for j in range(1 + i % 9)] + [3] for i in range(23)]


@pytest.mark.parametrize("beam", [1, 4])
def test_batches_at_once_give_what_one_at_a_time_gives(beam):
    model = tiny_model(40, 30, dropout=0.0)
    config = DecodeConfig(beam_size=beam, batch_size=4, max_len_b=10)
    alone = translate_ids(model, SENTENCES, config)
    together = translate_ids(model, SENTENCES, config, threads=DecodeThreads(inter=3, total=3))
    assert [[h.tokens for h in hs] for hs in together] == [[h.tokens for h in hs] for hs in alone]
    assert [h[0].score for h in together] == pytest.approx([h[0].score for h in alone], abs=1e-5)


def test_the_longest_batch_starts_first_and_results_keep_the_input_order():
    started: list[list[int]] = []

    def run(indices, stopped):
        started.append(indices)
        return [[len(SENTENCES[i])] for i in indices]

    found = in_length_batches(SENTENCES, DecodeConfig(batch_size=4), run)
    assert found == [[len(s)] for s in SENTENCES]
    firsts = [max(len(SENTENCES[i]) for i in batch) for batch in started]
    assert firsts == sorted(firsts, reverse=True) and firsts[0] == max(map(len, SENTENCES))
    assert sorted(i for batch in started for i in batch) == list(range(len(SENTENCES)))


def test_sentences_per_batch_follow_the_cost_of_a_step_unless_given():
    def model(d, d_ff, vocab, **more):
        return ModelConfig(d_model=d, d_ff=d_ff, n_heads=4, n_decoder_layers=3,
                           tgt_vocab_size=vocab, **more)  # fmt: skip

    # one row's step: 3 · (6·d² + 2·d·d_ff) + d·V multiply-adds
    assert model(256, 1024, 8000).step_products() == 3 * (6 * 65536 + 2 * 262144) + 2_048_000
    assert model(128, 512, 227).step_products() == 688_128 + 29_056
    auto = DecodeConfig()
    assert auto.batch_size == 0
    cases = [
        (model(256, 1024, 8000), 64),  # Multi30k's model: the reference
        (ModelConfig(), 64),  # base, 37,000 words
        (model(128, 512, 227), 256),  # the demo's: 64 · 6.69, at most 256
        (model(128, 512, 8000), 179),  # 64 · 4,800,512 / 1,712,128 = 179.4
        (model(128, 512, 32000), 64),  # a wide vocabulary: a costly step, big logits
        (model(32, 64, 40, architecture="rnn"), 64),  # an RNN: 64
    ]
    assert [auto.sentences_per_batch(m) for m, _ in cases] == [n for _, n in cases]
    # one row per sentence (greedy search, one sample): twice as many, at most 256
    greedy = [DecodeConfig(beam_size=1), DecodeConfig(sampling=True, nbest=1)]
    one_row = [128, 64, 256, 256, 128, 64]  # 64 · 2 · 4,800,512 / 4,784,128 = 128.4
    for search in greedy:
        assert [search.sentences_per_batch(m) for m, _ in cases] == one_row
    assert DecodeConfig(sampling=True, nbest=4).sentences_per_batch(cases[0][0]) == 64
    assert DecodeConfig(batch_size=7).sentences_per_batch(model(128, 512, 227)) == 7
    assert auto.sized_for(model(128, 512, 227)).batch_size == 256
    with pytest.raises(ValueError, match="sized_for"):
        in_length_batches(SENTENCES, auto, lambda indices, stopped: [])


@pytest.mark.parametrize(("batch_size", "sizes"), [(0, [256, 44]), (64, [64] * 4 + [44])])
def test_a_small_model_translates_in_batches_of_256_by_default(monkeypatch, batch_size, sizes):
    module = sys.modules[in_length_batches.__module__]  # inference/translation.py
    seen, search = [], module.search_batch

    def counted(model, src_ids, *args, **kwargs):
        seen.append(src_ids.size(0))
        return search(model, src_ids, *args, **kwargs)

    monkeypatch.setattr(module, "search_batch", counted)
    model = tiny_model(40, 30, dropout=0.0)
    assert DecodeConfig().sentences_per_batch(model.config) == 256
    sentences = [SENTENCES[i % len(SENTENCES)] for i in range(300)]
    config = DecodeConfig(beam_size=1, batch_size=batch_size, max_len_b=3)
    assert len(translate_ids(model, sentences, config)) == 300
    assert sorted(seen, reverse=True) == sizes


def test_every_worker_gets_a_batch_and_threads_are_shared_out():
    threads = DecodeThreads(inter=2, total=2)
    assert threads.batch_size(5, 64) == 3  # 5 sentences: batches of 3 and 2
    assert threads.batch_size(1000, 64) == 64
    assert threads.workers(1) == (1, 2)  # one batch: all the threads within it
    assert threads.workers(9) == (2, 1)
    assert DecodeThreads().workers(9) == (1, 0)  # one at a time, torch's threads untouched
    runtime = RuntimeConfig(threads=4, inter_threads=0)
    assert decode_threads(runtime, torch.device("cpu")) == DecodeThreads(4, 4)
    assert decode_threads(runtime, torch.device("meta")) == DecodeThreads()  # not a CPU: one


def test_workers_run_in_the_callers_autocast_on_their_own_threads():
    seen = []

    def run(batch):
        seen.append((threading.current_thread().name, torch.is_autocast_enabled("cpu"),
                     torch.get_autocast_dtype("cpu"), torch.get_num_threads()))  # fmt: skip
        return batch * 2

    before = torch.get_num_threads()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert map_batches(run, [1, 2, 3, 4], DecodeThreads(inter=2, total=2)) == [2, 4, 6, 8]
    assert torch.get_num_threads() == before
    assert {(on, dtype, n) for _, on, dtype, n in seen} == {(True, torch.bfloat16, 1)}


def test_the_caller_takes_the_longest_batches_and_a_worker_the_shortest():
    """Batches come longest first: the calling thread takes them from the front, the worker
    from the back, so a long batch runs beside short ones; every batch runs once."""
    ran = []

    def run(batch):
        time.sleep(0.05)  # long enough for the worker thread to start
        ran.append((batch, threading.current_thread() is threading.main_thread()))
        return batch * 10

    assert map_batches(run, [1, 2, 3, 4, 5, 6], DecodeThreads(inter=2, total=2)) == [
        10, 20, 30, 40, 50, 60]  # fmt: skip
    by_caller = dict(ran)
    assert sorted(by_caller) == [1, 2, 3, 4, 5, 6]
    assert by_caller[1] is True and by_caller[6] is False
    caller = [b for b, mine in ran if mine]
    worker = [b for b, mine in ran if not mine]
    assert caller == sorted(caller) and worker == sorted(worker, reverse=True)
    assert max(caller) < min(worker)


@pytest.mark.parametrize("failing", [1, 100], ids=["on-the-caller", "on-a-worker"])
def test_a_failing_batch_stops_the_other_threads_taking_more(failing):
    ran = []

    def run(batch):
        ran.append(batch)
        if batch == failing:
            time.sleep(0.1)  # the other thread takes a batch or two meanwhile
            raise RuntimeError(f"batch {batch} failed")
        time.sleep(0.02)
        return batch

    with pytest.raises(RuntimeError, match=f"batch {failing} failed"):
        map_batches(run, list(range(1, 101)), DecodeThreads(inter=2, total=2))
    assert 1 < len(ran) < 100


@pytest.mark.parametrize("value", [-1, 10**6])
def test_inter_threads_out_of_range_is_one_line(value):
    with pytest.raises(UserError, match="inter_threads"):
        prepare_runtime(RuntimeConfig(inter_threads=value))


def test_teacher_forced_batches_are_never_doubled_for_greedy_search(numbers_model, monkeypatch):
    """A greedy engine's search gets twice the sentences a batch, but scoring and alignments by
    masking, which hold every position's logits at once and have no steps, keep the size of
    the rule without it."""
    from transformer.config import decode as decode_module
    from transformer.inference import alignment, translation
    from transformer.inference import engine as engine_module
    from transformer.inference.engine import load_torch_engine

    greedy = load_torch_engine(numbers_model, beam_size=1)
    step = greedy.config.model.step_products()
    monkeypatch.setattr(decode_module, "REFERENCE_STEP", step)  # this model: 64 by the rule
    assert greedy.decode.sentences_per_batch(greedy.config.model) == 128
    assert greedy.decode.sentences_per_batch(greedy.config.model, search=False) == 64
    seen: dict[str, list[int]] = {"search": [], "score": [], "masking": []}
    search, score = translation.search_batch, engine_module.score_ids
    masking = alignment.attach_masking

    def searched(model, src_ids, *args, **kwargs):
        seen["search"].append(args[0].batch_size)  # the DecodeConfig
        return search(model, src_ids, *args, **kwargs)

    def scored(model, src, tgt, max_tokens, batch_size):
        seen["score"].append(batch_size)
        return score(model, src, tgt, max_tokens, batch_size)

    def masked(model, ids, found, words, max_tokens, batch_size):
        seen["masking"].append(batch_size)
        return masking(model, ids, found, words, max_tokens, batch_size)

    monkeypatch.setattr(translation, "search_batch", searched)
    monkeypatch.setattr(engine_module, "score_ids", scored)
    monkeypatch.setattr(translation, "attach_masking", masked)
    greedy.translate(["twelve", "seven"])
    greedy.score(["twelve"], ["douze"])
    greedy.translate(["twelve"], replace(greedy.decode, alignment=True, alignment_method="masking"))
    assert set(seen["search"]) == {128} and seen["score"] == [64] and seen["masking"] == [64]
