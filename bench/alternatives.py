"""Variants of token_logprobs benchmarked beside bench/token_logprobs.py (which is now the fused
autograd.Function these experiments led to).

Why they can be faster on CPU (torch 2.13): torch.logsumexp is a composite op, amax, then
(x - max) into a new tensor, exp_ (the accurate Sleef exp), sum, log: about four reads and two
writes of its input. torch.log_softmax is one fused vectorised kernel (max pass, sum-exp pass with
a faster exp, one write), about twice as fast per element. Its autograd node, however, saves its
(..., T, V) output for the backward pass, which is the second logits-sized tensor we must avoid.

- chunked_log_softmax: log_softmax + gather chunk by chunk. Fast and lean under no_grad (old and
  reference log-probs); under autograd the chunks' outputs are kept: a logits-sized tensor in total.
- token_logprobs.token_logprobs (ours, adopted from these prototypes): a torch.autograd.Function. Forward =
  chunked log_softmax + gather, saving only (logits, tokens). Backward = g * (onehot(token) -
  softmax(logits)), chunk by chunk, written into the one (..., T, V) gradient tensor any implementation
  must return.
"""

from __future__ import annotations

import torch

CHUNK_ELEMENTS = 1 << 19
"""logits elements per chunk: 2 MB of float32, so each chunk's temporary stays in a 2 MB L2 cache"""


def _rows(t: torch.Tensor, dims: int) -> torch.Tensor:
    """View t (..., T[, V]) as (R, T[, V]); `dims` = number of trailing dims after the leading ones."""
    return t.flatten(0, -dims - 1) if t.dim() > dims else t.unsqueeze(0)


def chunks(logits, *aligned, budget: int | None = None):
    """Zip of aligned chunks (logits_chunk, *aligned_chunks) covering logits (..., T, V) in pieces of
    about `budget` elements: whole rows (r, T, V) when a (T, V) slice fits, else (t, V) slices of a row.
    `aligned` tensors share the leading (..., T) dims with logits (tokens (..., T), grads (..., T, V)).
    Pieces come from split/unbind, so autograd sees one backward node, not one full-size slice per chunk."""
    budget = budget or CHUNK_ELEMENTS
    tensors = [_rows(logits, 2)] + [_rows(a, a.dim() - logits.dim() + 2) for a in aligned]  # (R, T[, V]) each
    R, T, V = tensors[0].shape
    if T * V <= budget:
        return zip(*[t.split(max(1, budget // (T * V))) for t in tensors], strict=True)
    step = max(1, budget // V)
    return zip(*[[piece for row in t.unbind(0) for piece in row.split(step)] for t in tensors], strict=True)


def _picked_log_softmax(logits_chunk, tokens_chunk):
    """log_softmax(logits)[token] on one chunk. (r, t, V), (r, t) -> (r, t)"""
    return torch.log_softmax(logits_chunk, dim=-1).gather(-1, tokens_chunk.unsqueeze(-1)).squeeze(-1)


def small_chunk_logsumexp(logits, tokens):
    """grpo_fixed's earlier algorithm (picked - logsumexp) with L2-sized chunks that also split along T.
    Separates the cost of big temporaries from the cost of logsumexp itself."""
    picked = logits.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)  # (..., T)
    lse = torch.cat([lg.logsumexp(dim=-1).flatten() for (lg,) in chunks(logits)])  # (R*T,)
    return picked - lse.view(picked.shape)


def chunked_log_softmax(logits, tokens):
    """log_softmax + gather, chunk by chunk: lean under no_grad, not under autograd (see module doc)."""
    return torch.cat([_picked_log_softmax(lg, tk).flatten() for lg, tk in chunks(logits, tokens)]).view(tokens.shape)


PROTOTYPES = {
    "proto: logsumexp, 2 MB chunks": small_chunk_logsumexp,
    "proto: chunked log_softmax+gather": chunked_log_softmax,
}
