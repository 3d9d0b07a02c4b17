"""Attention figures, positional-encoding plots and the HTML report get the data they should.

A tiny random model gives real AttentionMaps; panels are checked against slices of those maps,
files against their formats (PNG opens with PIL, SVG parses as XML), the positional data against
the sin/cos formula written here.
"""

import base64
import html
import io
import math
import re
import xml.etree.ElementTree as ET

import numpy as np
import pytest
import torch
from PIL import Image

from transformer import ModelConfig, Transformer
from transformer.inspect.report import write_html_report
from transformer.inspect.visualize import (
    CELL_INCHES,
    MAX_SIDE_INCHES,
    Panel,
    attention_panels,
    mean_cross_attention_panels,
    positional_data,
    save_panel,
    save_positional_plots,
    write_attention_figures,
)
from transformer.model import ATTENTION_KINDS
from transformer.model.embeddings import sinusoidal_table
from transformer.vocab import PAD_ID

SRC = ["▁I", "▁like", "▁cats", ".", "</s>"]
TGT = ["<s>", "▁J'", "aime", "▁les"]


def random_maps(n_layers=2, n_heads=4, batch_pad=False):
    torch.manual_seed(0)
    config = ModelConfig.preset(
        "tiny",
        src_vocab_size=40,
        tgt_vocab_size=30,
        n_heads=n_heads,
        n_encoder_layers=n_layers,
        n_decoder_layers=n_layers,
    )
    model = Transformer(config).eval()
    src = torch.tensor([[5, 6, 7, 8, 3], [9, 10, 3, PAD_ID, PAD_ID]])
    tgt = torch.tensor([[2, 11, 12, 13], [2, 14, PAD_ID, PAD_ID]])
    if not batch_pad:
        src, tgt = src[:1], tgt[:1]
    return model.attention_maps(src, tgt)


@pytest.fixture(scope="module")
def maps():
    return random_maps()


def expected_slice(maps, kind, layer, head, b=0):
    if kind == "encoder_self":
        return maps.encoder[layer][b, head]
    if kind == "decoder_self":
        return maps.decoder[layer].self_attention[b, head]
    return maps.decoder[layer].cross_attention[b, head]


def test_panels_are_the_slices_of_the_attention_maps(maps):
    panels = attention_panels(maps, SRC, TGT)
    assert len(panels) == 2 * 4 * 3  # layers x heads x kinds
    seen = {(p.kind, p.layer, p.head) for p in panels}
    assert seen == {(k, l, h) for k in ATTENTION_KINDS for l in range(2) for h in range(4)}
    axes = {"encoder_self": (SRC, SRC), "decoder_self": (TGT, TGT), "cross": (TGT, SRC)}
    for p in panels:
        np.testing.assert_array_equal(p.matrix, expected_slice(maps, p.kind, p.layer, p.head))
        assert (p.query_labels, p.key_labels) == tuple(map(tuple, axes[p.kind]))
        assert p.matrix.shape == (len(p.query_labels), len(p.key_labels))
        # Indices from 0, and what a person reads counts from 1.
        assert f"layer {p.layer + 1}," in p.title and f"head {p.head + 1}" in p.title
    # The decoder's self-attention is masked: nothing above the diagonal.
    decoder = [p for p in panels if p.kind == "decoder_self"]
    assert all(np.triu(p.matrix, k=1).max() == 0 for p in decoder)


def test_selecting_a_layer_a_head_and_a_kind(maps):
    one_each = attention_panels(maps, SRC, TGT, layer=1, head=2)
    assert [(p.kind, p.layer, p.head) for p in one_each] == [(k, 1, 2) for k in ATTENTION_KINDS]
    assert len(attention_panels(maps, SRC, TGT, layer=0)) == 4 * 3
    assert len(attention_panels(maps, SRC, TGT, head=3)) == 2 * 3
    (only,) = attention_panels(maps, SRC, TGT, layer=1, head=2, kinds=("cross",))
    np.testing.assert_array_equal(only.matrix, maps.decoder[1].cross_attention[0, 2])


def test_head_averaged_cross_attention(maps):
    means = mean_cross_attention_panels(maps, SRC, TGT)
    assert [(p.kind, p.layer, p.head) for p in means] == [("cross", 0, None), ("cross", 1, None)]
    for p in means:
        heads = [maps.decoder[p.layer].cross_attention[0, h].numpy() for h in range(4)]
        np.testing.assert_allclose(p.matrix, sum(heads) / 4, atol=1e-6)
        np.testing.assert_allclose(p.matrix.sum(axis=1), 1.0, atol=1e-5)
        assert (p.query_labels, p.key_labels) == (tuple(TGT), tuple(SRC))
    assert means[1].name == "cross_layer2_mean"


def test_bad_selections_name_the_value_and_the_range(maps):
    with pytest.raises(ValueError, match=r"layer 3 .*layers 1\.\.2"):
        attention_panels(maps, SRC, TGT, layer=2)
    with pytest.raises(ValueError, match=r"head 5 .*heads 1\.\.4"):
        attention_panels(maps, SRC, TGT, head=4)
    with pytest.raises(ValueError, match=r"head 0 "):
        write_attention_figures(maps, SRC, TGT, "unused", head=-1)
    with pytest.raises(ValueError, match="6 source labels for 5"):
        attention_panels(maps, [*SRC, "extra"], TGT)
    with pytest.raises(ValueError, match="'encoder'"):
        attention_panels(maps, SRC, TGT, kinds=("encoder",))


def test_padded_sentence_of_a_batch_is_cropped_to_its_tokens():
    maps = random_maps(n_layers=1, n_heads=2, batch_pad=True)
    panels = attention_panels(maps, ["▁a", "▁b", "</s>"], ["<s>", "▁x"], batch_index=1)
    cross = [p for p in panels if p.kind == "cross"][0]
    np.testing.assert_array_equal(cross.matrix, maps.decoder[0].cross_attention[1, 0, :2, :3])
    assert {p.matrix.shape for p in panels} == {(3, 3), (2, 2), (2, 3)}


def assert_png(path, min_size=(200, 150)):
    with Image.open(path) as image:
        image.verify()
    with Image.open(path) as image:
        assert image.format == "PNG"
        assert image.size[0] >= min_size[0] and image.size[1] >= min_size[1]


def assert_svg(path):
    root = ET.parse(path).getroot()
    assert root.tag.endswith("svg")


def test_figures_are_written_as_png_and_svg(maps, tmp_path):
    paths = write_attention_figures(maps, SRC, TGT, tmp_path / "figs", layer=1, head=0)
    names = sorted(p.name for p in paths)
    stems = [f"{kind}_layer2_head1" for kind in ATTENTION_KINDS]
    assert names == sorted(f"{s}.{ext}" for s in stems for ext in ("png", "svg"))
    for path in paths:
        assert path.parent == tmp_path / "figs"
        (assert_png if path.suffix == ".png" else assert_svg)(path)


def test_a_head_average_figure_and_awkward_labels(maps, tmp_path):
    (mean,) = mean_cross_attention_panels(maps, SRC, TGT, layer=0)
    assert [p.name for p in save_panel(mean, tmp_path)] == [
        "cross_layer1_mean.png",
        "cross_layer1_mean.svg",
    ]
    # "$$" would start matplotlib's mathtext and fail; tokens are shown literally.
    odd = Panel("cross", 0, 0, np.full((2, 3), 1 / 3), ("$$", "a_b"), ("<", "&", "^{"), "odd")
    png, svg = save_panel(odd, tmp_path)
    assert_png(png)
    assert_svg(svg)


def test_a_long_sentence_s_heatmap_is_drawn_within_a_bounded_size(tmp_path):
    # 0.42 in a cell whatever the length: a 401-token sentence's maps were 18,700 pixels square
    # (652 s and 11.4 GB for its figures); the cells now shrink to fit MAX_SIDE_INCHES.
    labels = tuple(f"▁w{i}" for i in range(401))
    long = Panel("encoder", 0, 0, np.full((401, 401), 1 / 401), labels, labels, "long")
    png, svg = save_panel(long, tmp_path, dpi=110)
    width, height = Image.open(png).size
    assert max(width, height) <= 110 * (MAX_SIDE_INCHES + 4), (width, height)
    assert_svg(svg)
    assert all(f"w{i}<" in svg.read_text() for i in (0, 200, 400))  # every label kept
    short = Panel("cross", 0, 0, np.full((4, 5), 0.2), TGT, SRC, "short")
    png, _ = save_panel(short, tmp_path, dpi=110)
    assert Image.open(png).size[0] >= 110 * CELL_INCHES * 5  # cells of a short one as before


def test_positional_data_follows_the_formula():
    d_model, positions = 6, 20
    data = positional_data(d_model, positions)

    def pe(pos, dim):
        angle = pos / 10000 ** (2 * (dim // 2) / d_model)
        return math.sin(angle) if dim % 2 == 0 else math.cos(angle)

    table = [[pe(p, d) for d in range(d_model)] for p in range(positions)]
    np.testing.assert_allclose(data.table, table, atol=1e-6)
    np.testing.assert_array_equal(data.table, sinusoidal_table(positions, d_model).double())
    assert data.offsets == (0, 5)
    assert list(data.distances) == list(range(15))
    for row, p in zip(data.dot_products, data.offsets, strict=True):
        expected = [sum(pe(p, d) * pe(p + k, d) for d in range(d_model)) for k in range(15)]
        np.testing.assert_allclose(row, expected, atol=1e-5)
    # PE(p)·PE(p+k) = Σ cos(k ω_i): the same curve for every start p.
    np.testing.assert_allclose(data.dot_products[0], data.dot_products[1], atol=1e-5)


def test_positional_plots_are_written(tmp_path):
    paths = save_positional_plots(8, 30, tmp_path)
    assert sorted(p.name for p in paths) == [
        "pe_dot_product.png",
        "pe_dot_product.svg",
        "pe_heatmap.png",
        "pe_heatmap.svg",
    ]
    for path in paths:
        (assert_png if path.suffix == ".png" else assert_svg)(path)


def test_html_report_is_self_contained_and_escaped(tmp_path):
    maps = random_maps(n_layers=1, n_heads=2)
    source = 'I <b>like</b> "cats" & dogs'
    translation = "J'aime les <chats> & chiens"
    src = ["▁I", "▁<b>", "▁&", '"', "</s>"]
    path = write_html_report(
        tmp_path / "out" / "report.html",
        source,
        translation,
        maps,
        src,
        TGT,
        extra_numbers={"log-prob <sum>": -3.25, "preset": "tiny"},
    )
    text = path.read_text(encoding="utf-8")
    assert text.startswith("<!DOCTYPE html>")
    # Nothing is fetched: no remote or protocol-relative src/href, no scripts or stylesheets.
    assert not re.search(r"""(src|href)\s*=\s*["']?\s*(https?:)?//""", text, re.I)
    assert "http://" not in text and "https://" not in text
    assert "<script" not in text and "<link" not in text
    # Text is escaped: the raw markup never appears.
    assert html.escape(source) in text and source not in text
    assert html.escape(translation) in text and "<chats>" not in text
    assert html.escape("▁<b>") in text and "log-prob &lt;sum&gt;" in text
    # One embedded PNG per panel: kinds x layers x heads, plus the head-averaged alignment.
    images = re.findall(r'<img src="data:image/png;base64,([A-Za-z0-9+/=]+)"', text)
    assert len(images) == 3 * 1 * 2 + 1
    for data in images:
        with Image.open(io.BytesIO(base64.b64decode(data))) as image:
            assert image.format == "PNG"
    # The numbers: the alignment table, and one <details> of tables per kind and layer.
    mean = maps.decoder[0].cross_attention[0].mean(dim=0)
    assert f">{mean[1, 2].item():.3f}</td>" in text
    assert text.count("<details>") == 3
    assert text.count("<table") == text.count("</table>")
