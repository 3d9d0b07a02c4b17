"""Float32 products through oneDNN (model/products.py) against ``F.linear`` and its gradients,
and the choice between the two libraries."""

import pytest
import torch
import torch.nn.functional as F

from transformer.config import ModelConfig
from transformer.model import Transformer, products
from transformer.training.chunked_loss import linear_label_smoothed_nll

pytestmark = pytest.mark.skipif(not products.can_pack(), reason="this PyTorch has no oneDNN here")


@pytest.fixture
def library(monkeypatch):
    """Sets the library every product uses ("mkl" or "onednn") for one test."""

    def choose(name: str) -> None:
        monkeypatch.setenv(products.CHOICE_VARIABLE, name)
        products.onednn_is_faster.cache_clear()

    yield choose
    products.onednn_is_faster.cache_clear()  # chosen again once the variable is gone


def close(a: torch.Tensor, b: torch.Tensor) -> None:
    """Equal to float32 rounding: sums of up to 256 terms in another order."""
    a, b = a.detach(), b.detach()
    torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5 * float(b.abs().max()) + 1e-6)


@pytest.mark.parametrize("shape", [(7, 32), (3, 5, 32)])
@pytest.mark.parametrize("bias", [True, False])
def test_linear_through_onednn_gives_f_linear_and_its_gradients(library, shape, bias):
    library("onednn")
    assert products.onednn_is_faster()
    torch.manual_seed(0)
    x = torch.randn(*shape, requires_grad=True)
    weight = torch.randn(24, 32, requires_grad=True)
    b = torch.randn(24, requires_grad=True) if bias else None
    upstream = torch.randn(*shape[:-1], 24)
    got = products.linear(x, weight, b)
    assert got.grad_fn is not None and "_Linear" in type(got.grad_fn).__name__
    grads = torch.autograd.grad(got, [x, weight] + ([b] if bias else []), upstream)
    expected = F.linear(x, weight, b)
    wanted = torch.autograd.grad(expected, [x, weight] + ([b] if bias else []), upstream)
    close(got, expected)
    for g, w in zip(grads, wanted, strict=True):
        close(g, w)


def test_only_the_gradients_asked_for_are_made(library):
    library("onednn")
    x = torch.randn(6, 16)  # data: no gradient
    weight = torch.randn(8, 16, requires_grad=True)
    (grad_w,) = torch.autograd.grad(products.linear(x, weight).sum(), [weight])
    close(grad_w, torch.ones(6, 8).t() @ x)


def test_product_takes_a_transposed_view(library):
    library("onednn")
    a, b, bias = torch.randn(9, 12), torch.randn(12, 5), torch.randn(5)
    close(products.product(a, b.t(), bias), a @ b + bias)  # bᵀ given as a view: (5, 12)


def test_with_mkl_chosen_it_is_f_linear_bit_for_bit(library):
    library("mkl")
    assert not products.onednn_is_faster()
    x, weight = torch.randn(5, 32), torch.randn(24, 32)
    assert torch.equal(products.linear(x, weight), F.linear(x, weight))
    assert torch.equal(products.product(x, weight), F.linear(x, weight))


def test_without_a_gradient_small_products_go_through_mkl(library, monkeypatch):
    """Below ``SMALL_PRODUCT`` multiply-adds the product is MKL's (``F.linear``, bit for bit);
    from it on, oneDNN's, for rows given as a matrix or with more dims; with a gradient,
    oneDNN's at any size."""
    library("onednn")
    calls = []
    through_onednn = products.onednn_product
    monkeypatch.setattr(
        products, "onednn_product", lambda *a: calls.append(a[0].shape) or through_onednn(*a)
    )
    weight = torch.randn(128, 128)  # 16,384 multiply-adds a row: 64 rows make SMALL_PRODUCT
    small, large, rows = torch.randn(63, 128), torch.randn(2, 32, 128), torch.randn(64, 128)
    with torch.no_grad():
        assert torch.equal(products.linear(small, weight), F.linear(small, weight))
        assert calls == []
        close(products.linear(large, weight), F.linear(large, weight))
        close(products.linear(rows, weight), F.linear(rows, weight))
        assert calls == [(64, 128), (64, 128)]
    x = torch.randn(1, 128, requires_grad=True)
    products.linear(x, weight)
    assert len(calls) == 3  # training's products stay with oneDNN


def test_other_dtypes_and_autocast_stay_with_f_linear(library):
    library("onednn")
    x, weight = torch.randn(5, 32), torch.randn(24, 32)
    assert torch.equal(
        products.linear(x.double(), weight.double()), F.linear(x.double(), weight.double())
    )
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert products.linear(x, weight).dtype == torch.bfloat16  # autocast's product


def test_a_training_step_is_the_same_with_either_library(library):
    """The model's loss and gradients (every Linear, and the fused loss's products) through
    oneDNN against MKL."""
    torch.manual_seed(0)
    model = Transformer(ModelConfig.preset("tiny", src_vocab_size=50, tgt_vocab_size=50,
                                           dropout=0.0))  # fmt: skip
    src = torch.randint(4, 50, (3, 7))
    tgt = torch.randint(4, 50, (3, 6))
    results = []
    for name in ("mkl", "onednn"):
        library(name)
        model.zero_grad()
        hidden = model.decode_hidden(tgt[:, :-1], *model.encode(src))  # (B, T, D)
        sums = linear_label_smoothed_nll(
            hidden.reshape(-1, hidden.size(-1)), model.output, tgt[:, 1:].reshape(-1), 0.1, 4
        )
        sums.loss.backward()
        results.append((sums.loss.detach(), [p.grad.clone() for p in model.parameters()]))
    (loss_mkl, grads_mkl), (loss_onednn, grads_onednn) = results
    close(loss_onednn, loss_mkl)
    for g, w in zip(grads_onednn, grads_mkl, strict=True):
        close(g, w)


def test_the_choice_is_measured_once_and_kept():
    products.onednn_is_faster.cache_clear()
    first = products.onednn_is_faster()
    assert products.onednn_is_faster() is first
    assert products.onednn_is_faster.cache_info().hits >= 1


def test_two_threads_whose_first_products_come_together_measure_once(monkeypatch):
    # Two batches at once (runtime.inter_threads) start their first products together: both
    # threads measured the two libraries beside each other, and could answer differently.
    import threading
    import time

    measured = []

    def measure() -> bool:
        measured.append(threading.current_thread().name)
        time.sleep(0.2)  # the measurement takes a while: the other thread comes meanwhile
        return len(measured) == 1  # a second measurement would answer otherwise

    monkeypatch.delenv(products.CHOICE_VARIABLE, raising=False)
    monkeypatch.setattr(products, "_measure", measure)
    monkeypatch.setattr(products, "_MEASURED", [])
    products.onednn_is_faster.cache_clear()
    answers = []
    threads = [threading.Thread(target=lambda: answers.append(products.onednn_is_faster()))
               for _ in range(2)]  # fmt: skip
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    products.onednn_is_faster.cache_clear()  # the next test's products choose again
    assert len(measured) == 1 and answers == [True, True], (measured, answers)
