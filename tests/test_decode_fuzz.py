"""Property-based: any number for any search option, through the command line, is either
translated (exit 0, a line out per line in) or refused in one line naming the option (exit 2),
never a traceback, and the input file is left byte-identical. Numbers of every kind: tiny, huge,
negative, non-finite, just outside a bound, of the wrong type; with and without sampling.

A longer run by hand: ``FUZZ_EXAMPLES=2000 pytest tests/test_decode_fuzz.py``.
"""

import math
import os
from dataclasses import fields

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from transformer.config import DecodeConfig
from transformer.config.checks import range_of

from helpers import cli_main

RANGED = [f.name for f in fields(DecodeConfig) if "range" in f.metadata]
EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "30"))
pytestmark = pytest.mark.slow  # the tests' trained model


def near_bounds() -> st.SearchStrategy[float]:
    """The bounds of every range, and the numbers next to them."""
    ends = {end for name in RANGED for end in vars(range_of(DecodeConfig, name)).values()}
    numbers = [float(e) for e in ends if not isinstance(e, bool)]
    around = [math.nextafter(e, d) for e in numbers for d in (-math.inf, math.inf)]
    return st.sampled_from(sorted({*numbers, *around, *(e + d for e in numbers for d in (-1, 1))}))


NUMBERS = st.one_of(
    st.integers(-(2**70), 2**70).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    near_bounds().map(repr),
    st.sampled_from(["1e-300", "5e-324", "1e300", "-0", "0.5", "2.5", "1e400", "abc", ""]),
)


@settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])  # fmt: skip
@given(name=st.sampled_from(RANGED), value=NUMBERS, sampling=st.booleans())
def test_any_number_for_any_option_is_translated_or_refused_in_one_line(
    numbers_model, tmp_path_factory, name, value, sampling
):
    folder = tmp_path_factory.mktemp("fuzz")
    source = folder / "in.txt"
    source.write_text("twelve\nforty two\n")
    before = source.read_bytes()
    option = [f"--decode.{name}={value}", *(["--decode.sampling"] if sampling else [])]
    result = cli_main("translate", str(numbers_model), "-i", str(source), *option)
    assert source.read_bytes() == before
    if result.code == 0:
        lines = result.stdout.splitlines()
        assert result.stderr == [] and lines, result
        if name == "nbest" and int(float(value)) > 1:  # Moses n-best: index ||| text ||| score
            assert {line.split(" ||| ")[0] for line in lines} == {"0", "1"}, lines
            assert all(math.isfinite(float(line.split(" ||| ")[2])) for line in lines), lines
        else:
            assert len(lines) == 2, lines
        return
    assert result.code == 2, (name, value, result)
    assert len(result.stderr) == 1 and "Traceback" not in result.stderr[0], result.stderr
    assert name in result.stderr[0], (name, value, result.stderr)
