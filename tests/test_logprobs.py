"""bench/token_logprobs.py: the chunked kernel equals the twins' one-liner in value and gradient, and never
allocates a logits-sized temporary in the forward (only the gradient itself in the backward)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import grpo_fixed

# The kernel is benchmark code (no notebook imports it): it lives with its benchmark, in bench/.
sys.path.append(str(Path(__file__).resolve().parent.parent / "bench"))
import token_logprobs as kernel  # noqa: E402


class LargestAllocation(TorchDispatchMode):
    """Records the largest number of elements of any tensor an op returns inside the block."""

    def __init__(self):
        super().__init__()
        self.largest = 0
        self.sizes = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, (tuple, list)) else [out]:
            if isinstance(t, torch.Tensor) and not t._is_view():
                self.largest = max(self.largest, t.numel())
                self.sizes.append(t.numel())
        return out


def make_inputs(shape, scale=5.0, seed=0):
    g = torch.Generator().manual_seed(seed)
    logits = (scale * torch.randn(*shape, generator=g)).requires_grad_(True)  # (..., T, V)
    tokens = torch.randint(0, shape[-1], shape[:-1], generator=g)  # (..., T)
    return logits, tokens


@pytest.mark.parametrize("shape", [(3, 5), (2, 4, 6), (2, 3, 4, 5), (1, 9, 300_000)])
def test_values_and_gradients_equal_the_one_liner(shape, monkeypatch):
    monkeypatch.setattr(kernel, "LOGPROB_CHUNK", 1000)  # many chunks, both chunking paths
    logits, tokens = make_inputs(shape)
    ours = kernel.token_logprobs(logits, tokens)
    (grad_ours,) = torch.autograd.grad(ours.sum(), logits)
    ref = grpo_fixed.token_logprobs(logits, tokens)
    (grad_ref,) = torch.autograd.grad(ref.sum(), logits)
    torch.testing.assert_close(ours, ref)
    torch.testing.assert_close(grad_ours, grad_ref)


def test_large_logits_stay_finite():
    logits = torch.tensor([[[0.0, 200.0]]])  # token 0 has probability e^-200
    assert kernel.token_logprobs(logits, torch.tensor([[0]])).item() == pytest.approx(-200.0)


def test_no_logits_sized_temporary():
    logits, tokens = make_inputs((4, 64, 8192), seed=1)  # 2M elements, 4 chunks of LOGPROB_CHUNK
    assert logits.numel() > 2 * kernel.LOGPROB_CHUNK
    with LargestAllocation() as forward:
        out = kernel.token_logprobs(logits, tokens)
    assert forward.largest <= kernel.LOGPROB_CHUNK, forward.largest
    with LargestAllocation() as one_liner:
        grpo_fixed.token_logprobs(logits, tokens)
    assert one_liner.largest == logits.numel(), "the probe must see the one-liner's logits-sized log_softmax"
    with LargestAllocation() as backward:
        torch.autograd.grad(out.sum(), logits)
    assert backward.sizes.count(logits.numel()) == 1 and backward.largest == logits.numel()  # the gradient only
