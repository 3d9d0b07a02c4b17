"""`transformer explain`: the walkthrough's numbers against formulas written here with `math`,
and the rendered text against those numbers as the renderer formats them.
"""

import math
import re
import unicodedata

import pytest
import torch

from transformer.inspect.worked_examples import (
    TOPICS,
    Step,
    explain,
    format_value,
    render,
    render_matrix,
    walkthrough,
)


def softmax(xs):
    exps = [math.exp(x) for x in xs]
    return [e / sum(exps) for e in exps]


def dot(a, b):
    return sum(x * y for x, y in zip(a, b, strict=True))


def step(topic, title_start):
    matches = [s for s in walkthrough(topic) if s.title.startswith(title_start)]
    assert len(matches) == 1, [s.title for s in walkthrough(topic)]
    return matches[0]


def assert_matrix(actual, expected, tol=1e-6):
    assert list(actual.shape) == [len(expected), len(expected[0])]
    for got_row, want_row in zip(actual.tolist(), expected, strict=True):
        assert got_row == pytest.approx(want_row, abs=tol)


def rendered_row(s, label):
    """The entries printed on the row of `label` in the rendered step."""
    text = render([s])
    for line in render_matrix(s)[bool(s.col_labels) :]:  # skip the header of column labels
        fields = line.split()
        if fields[0] == label:
            assert line in text
            return fields[1:]
    raise AssertionError(f"no row {label!r} in\n{text}")


def notes_text(s):
    """The step's "notes:" line, unwrapped."""
    text = render([s])
    assert "notes:" in text
    return " ".join(text[text.index("notes:") :].split())


THE, CAT, SAT = [1, 0, 1, 0], [0, 1, 0, 1], [1, 1, 1, 1]
X = [THE, CAT, SAT]


def test_the_cat_sat_steps_follow_the_formula():
    for name in ("Queries", "Keys", "Values"):
        assert_matrix(step("attention", name).matrix, X)  # W = I
    scores = [[dot(q, k) for k in X] for q in X]
    assert_matrix(step("attention", "Scores").matrix, scores)
    scaled = [[v / math.sqrt(4) for v in row] for row in scores]
    assert_matrix(step("attention", "Scaled").matrix, scaled)
    weights = [softmax(row) for row in scaled]
    assert_matrix(step("attention", "Attention weights").matrix, weights)
    output = [
        [sum(w * v[d] for w, v in zip(row, X, strict=True)) for d in range(4)] for row in weights
    ]
    assert_matrix(step("attention", "Output").matrix, output)

    s = step("attention", "Attention weights")
    assert s.row_labels == s.col_labels == ("The", "CAT", "SAT")
    assert rendered_row(s, "SAT") == [f"{w:.4f}" for w in weights[2]]
    assert rendered_row(s, "SAT")[2] == "0.5761"  # the notes print 0.5762
    assert "0.5762" in notes_text(s)
    out = step("attention", "Output")
    assert rendered_row(out, "The") == [f"{v:.4f}" for v in output[0]]
    assert "[1.2669, 0.9999, 1.2669, 0.9999]" in notes_text(out)
    assert "[0.8446, 0.5777, 0.8446, 0.5777]" in notes_text(out)


def test_scaling_example():
    q, k1, k2 = [2, 3, 4, 1], [1, 0, 1, 0], [0, 1, 0, 1]
    raw = [dot(q, k1), dot(q, k2)]
    assert_matrix(step("scaling", "Raw").matrix, [raw])
    assert_matrix(step("scaling", "softmax without").matrix, [softmax(raw)])
    scaled = [v / 2 for v in raw]
    assert_matrix(step("scaling", "Scaled").matrix, [scaled])
    assert_matrix(step("scaling", "softmax with scaling").matrix, [softmax(scaled)])
    assert rendered_row(step("scaling", "softmax without"), "Q") == ["0.8808", "0.1192"]
    assert rendered_row(step("scaling", "softmax with scaling"), "Q") == ["0.7311", "0.2689"]
    note = notes_text(step("scaling", "Scaled"))
    assert "6/√2" in note and f"{6 / math.sqrt(2):.4f}" in note


def test_layer_norm_steps():
    x = [2.0, 4.0, 6.0, 8.0]
    mean = sum(x) / 4
    var = sum((v - mean) ** 2 for v in x) / 4
    sd = math.sqrt(var + 1e-5)
    x_hat = [(v - mean) / sd for v in x]
    assert_matrix(step("layernorm", "Mean").matrix, [[mean]])
    assert_matrix(step("layernorm", "Variance").matrix, [[var]])
    assert_matrix(step("layernorm", "Standard deviation").matrix, [[sd]], tol=1e-6)
    assert_matrix(step("layernorm", "Normalise").matrix, [x_hat])
    assert_matrix(step("layernorm", "Scale and shift y").matrix, [x_hat])  # γ = 1, β = 0
    assert_matrix(step("layernorm", "Scale and shift,").matrix, [[2 * v + 1 for v in x_hat]])
    assert rendered_row(step("layernorm", "Normalise"), "x̂") == [f"{v:.4f}" for v in x_hat]


def test_positional_encoding_steps():
    pe = [
        [f(p / 10000 ** (2 * (d // 2) / 4)) for d, f in enumerate([math.sin, math.cos] * 2)]
        for p in range(4)
    ]
    s = step("positional", "PE(pos")
    assert_matrix(s.matrix, pe)
    assert_matrix(step("positional", "Angles").matrix, [[p, p / 100] for p in range(4)])
    assert s.row_labels == ("pos 0", "pos 1", "pos 2", "pos 3")
    printed = render([s])
    assert "0.84147" in printed and "0.99995" in printed
    note = notes_text(s)
    assert "0.39" in note and "10000^(1/4)" in note and f"{math.cos(0.01):.5f}" in note


MASK_X = [[0.1, 0.2, 0.3, 0.4], [0.5, 0.6, 0.7, 0.8], [0.9, 1.0, 1.1, 1.2], [0.0] * 4]


def test_decoder_masking_steps():
    assert step("masks", "Padding mask").matrix.int().tolist() == [[1, 1, 1, 0]]
    look_ahead = [[int(k <= q) for k in range(4)] for q in range(4)]
    assert step("masks", "Look-ahead").matrix.int().tolist() == look_ahead
    combined = [[a * (k < 3) for k, a in enumerate(row)] for row in look_ahead]
    assert step("masks", "Combined").matrix.int().tolist() == combined

    raw = [[dot(q, k) for k in MASK_X] for q in MASK_X]
    assert_matrix(step("masks", "Raw").matrix, raw, tol=1e-5)
    scaled = [[v / 2 for v in row] for row in raw]
    masked = step("masks", "Masked").matrix
    for q in range(4):
        for k in range(4):
            if combined[q][k]:
                assert masked[q, k].item() == pytest.approx(scaled[q][k], abs=1e-5)
            else:
                assert masked[q, k].item() == float("-inf")
    weights = []
    for q in range(4):
        allowed = softmax([scaled[q][k] for k in range(4) if combined[q][k]])
        weights.append(allowed + [0.0] * (4 - len(allowed)))
    s = step("masks", "Attention weights")
    assert_matrix(s.matrix, weights, tol=1e-5)
    assert weights[3][:3] == pytest.approx([1 / 3] * 3)

    assert rendered_row(s, "y2") == [f"{w:.4f}" for w in weights[1]]
    assert rendered_row(step("masks", "Masked"), "y1")[1:] == ["-inf"] * 3
    assert rendered_row(step("masks", "Combined"), "<pad>") == ["1", "1", "1", "0"]
    note = notes_text(s)
    assert "[0.3, 0.7]" in note and "[1, 0, 0, 0]" in note
    assert "1.9, 3.1, 5.1" in notes_text(step("masks", "Raw"))


def test_topic_selector():
    assert TOPICS == ("attention", "scaling", "layernorm", "positional", "masks")
    everything = explain()
    starts = [everything.index(f"== {topic}:") for topic in TOPICS]
    assert starts == sorted(starts)
    only = explain("layernorm")
    assert "== layernorm:" in only and "== attention:" not in only
    assert only.count("Step 1.") == 1
    for topic in TOPICS:
        assert all(isinstance(s, Step) for s in walkthrough(topic))


def test_unknown_topic_names_it_and_the_valid_ones():
    with pytest.raises(ValueError, match="'softmax'") as error:
        explain("softmax")
    for topic in TOPICS:
        assert topic in str(error.value)
    with pytest.raises(ValueError, match="'Attention'"):
        walkthrough("Attention")


def test_colour_only_when_asked():
    assert "\033[" not in explain()
    coloured = explain("masks", color=True)
    assert "\033[" in coloured
    # The same text once the escape codes are removed.
    assert re.sub(r"\033\[[0-9;]*m", "", coloured) == explain("masks")


def display_width(text):
    return sum(not unicodedata.combining(ch) for ch in text)


@pytest.mark.parametrize("topic", TOPICS)
def test_matrices_are_aligned(topic):
    for s in walkthrough(topic):
        lines = render_matrix(s)
        assert len(lines) == s.matrix.shape[0] + bool(s.col_labels)
        assert len({display_width(line) for line in lines}) == 1, "\n".join(lines)


def test_labels_with_combining_marks_stay_aligned():
    s = Step("t", torch.eye(2), ("x̂", "abc"), ("é", "y\u0302"))  # "ŷ" as y + combining circumflex
    lines = render_matrix(s)
    assert len({display_width(line) for line in lines}) == 1, "\n".join(lines)


def test_format_value():
    assert format_value(-0.00001, 4) == "0.0000"
    assert format_value(float("-inf"), 4) == "-inf"
    assert format_value(True, 4) == "1" and format_value(False, 4) == "0"
    assert format_value(0.57612, 4) == "0.5761"


def test_step_rejects_mismatched_labels():
    with pytest.raises(ValueError, match="row labels"):
        Step("t", torch.zeros(2, 3), ("a",), ("x", "y", "z"))
    with pytest.raises(ValueError, match="2-D"):
        Step("t", torch.zeros(3))
