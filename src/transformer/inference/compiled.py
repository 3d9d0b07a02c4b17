"""Compiled decoding (``runtime.compile`` for translate, evaluate and serve): the decoder's step
for one new token as one ``torch.compile``d function.

An eager decoding step is a few hundred small operators, each dispatched from Python. Compiled,
the step's element-wise work is fused into generated code and the Python between operators is
gone. A compiled function must see the same code at every step, so the step
- reads a ``fixed`` key/value cache, as long as the longest output from the start
  (``cache.FixedStep``), and writes the new keys and values at a position held as a tensor;
- attends over every slot of that cache, the empty ones masked (``masks.filled_slots_mask``);
- is compiled once with dynamic shapes, for any number of rows (a single row runs uncompiled),
  source length and cache length.

It computes the same model through the same modules (``Transformer.decode_hidden``); only the
order of some floating-point sums differs, so the outputs equal the eager ones up to rounding
(tests/test_compiled_decoding.py). The searches use it through ``RunningBatch`` once
``compile_decoding`` has been called for their model. Where it cannot run (no C++ compiler on a
CPU, no Triton on a GPU; an RNN model) decoding stays eager, with one line on stderr.

Compiled decoding translates one batch at a time (``parallel.decode_threads``): called from two
threads at once, the compiled function's guards failed spuriously and it compiled again, for 20
seconds, in the middle of a file (torch 2.13). What it gives on the 2-core CPU is in
docs/speed.md: 1.02-1.38x the default's speed at three sizes when it was made, 0.52-1.37x
since the eager step got faster (the gain only at the demo's size, greedy, on passes of a tenth
of a second), after 7-55 seconds of compiling, so it is an option, off by default.

Shapes: N rows (sentences × beams), S source length, D model width, H heads, Dh head width.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from weakref import WeakKeyDictionary

import torch
import torch.fx.experimental._config as shape_config
from torch import Tensor

from ..device import why_not_compiled
from ..model.base import EncoderDecoder
from ..model.cache import DecoderCache, FixedSlots, FixedStep
from ..model.transformer import Transformer

# (new token ids (N, 1), encoder output (N, S, D), source mask (N, 1, 1, S), the fixed cache)
# -> the decoder's output for the new position (N, D)
Step = Callable[[Tensor, Tensor, Tensor, DecoderCache], Tensor]

_STEPS: WeakKeyDictionary[EncoderDecoder, Step] = WeakKeyDictionary()


def compile_decoding(model: EncoderDecoder) -> bool:
    """Makes every search over ``model`` decode with a compiled step from now on (compiled at
    its first step). False, with one line on stderr, where it cannot: the model decodes eagerly.
    """
    device = next(model.parameters()).device
    why = why_not_compiled(device)
    if not isinstance(model, Transformer):
        why = f"the {model.name} model has no compiled step"
    if why is not None:
        print(f"transformer: decoding runs uncompiled: {why}", file=sys.stderr)
        return False
    if model not in _STEPS:
        _STEPS[model] = _compiled_step(model)
        print("transformer: decoding is compiled at its first step (tens of seconds)",
              file=sys.stderr)  # fmt: skip
    return True


def compiled_step(model: EncoderDecoder) -> Step | None:
    """The compiled step ``compile_decoding`` made for ``model``, or None (decode eagerly)."""
    return _STEPS.get(model)


def fixed_cache(model: EncoderDecoder, longest: int) -> DecoderCache:
    """An empty fixed cache for outputs of up to ``longest`` tokens (0: as many as the model
    has positions): the decoder input <s> y1 .. y_longest."""
    assert isinstance(model, Transformer)
    positions = longest + 1 if longest else model.config.max_positions
    return DecoderCache.empty(len(model.decoder.layers), positions, fixed=True)


def _compiled_step(model: Transformer) -> Step:
    """The step: eager set-up of the cache at the first step, then the compiled function, which
    takes only tensors (an int or an object of ours among its arguments would be guarded on, and
    a new position would compile the step again)."""
    heads = model.config.n_heads
    d_head = model.config.d_model // heads

    def decode_one(
        new_ids: Tensor, memory: Tensor, src_mask: Tensor, position: Tensor,
        keys: list[Tensor], values: list[Tensor],
        cross_keys: list[Tensor], cross_values: list[Tensor],
    ) -> Tensor:  # fmt: skip
        slots = zip(keys, values, cross_keys, cross_values, strict=True)
        layers = [FixedSlots(*layer, position) for layer in slots]
        hidden = model.decode_hidden(new_ids, memory, src_mask, FixedStep(layers, position))
        return hidden[:, -1]  # (N, D) from (N, 1, D)

    compiled = torch.compile(decode_one, dynamic=True)

    def step(new_ids: Tensor, memory: Tensor, src_mask: Tensor, cache: DecoderCache) -> Tensor:
        if cache.length == 0:  # the encoder-decoder keys and values, and the empty buffers
            for layer, slots in zip(model.decoder.layers, cache.layers, strict=True):
                if slots.cross_keys is None:
                    slots.set_cross(*layer.cross_attn.project_kv(memory, memory))  # (N, H, S, Dh)
                assert slots.cross_keys is not None
                slots.allocate(new_ids.size(0), heads, d_head, like=slots.cross_keys)
        # a copy: the newest column of the running tokens has a stride that grows every step,
        # and strides are guarded on
        new = new_ids.clone(memory_format=torch.contiguous_format)  # (N, 1)
        fixed = cache.fixed_step()
        # One row runs the same step uncompiled: sizes of 1 are specialised, so it would be
        # compiled again (37 s at OPUS-MT size), and a batch's last sentence often runs alone.
        run = decode_one if new.size(0) == 1 else compiled
        # Sizes that happen to be equal (8 rows, 8 heads) would otherwise share one symbol, and
        # the heads' constant would make the rows static: compiled again for every batch size.
        with shape_config.patch(use_duck_shape=False):
            hidden = run(new, memory, src_mask, fixed.length,
                         [s.keys for s in fixed.layers], [s.values for s in fixed.layers],
                         [s.cross_keys for s in fixed.layers],
                         [s.cross_values for s in fixed.layers])  # fmt: skip
        cache.advance()
        return hidden  # (N, D)

    return step


def warm_up(translate: Callable[[list[str]], object], model: EncoderDecoder) -> bool:
    """Compiles ``model``'s step now, by translating two short lines with ``translate`` (a
    server does this before it listens, so that no request waits tens of seconds for it).
    False where the model decodes eagerly and there is nothing to compile."""
    if compiled_step(model) is None:
        return False
    translate(["a", "b"])  # two rows: one row runs uncompiled
    return True
