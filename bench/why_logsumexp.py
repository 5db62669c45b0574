"""Why the chunked kernel (bench/token_logprobs.py) is slower than log_softmax-based code on CPU: per-op timings.

  .venv/bin/python bench/why_logsumexp.py

On one (16, 32000) float32 chunk (2 MB, cache-resident), one thread: torch.logsumexp costs about
twice torch.log_softmax although it writes 16 numbers instead of 512 000, because on CPU it is a
composite of separate kernels (amax; x - max into a new tensor; exp_; sum; log) and its exp is
the accurate Sleef exp, slower than the exp inside the fused softmax kernels. The lines below time
each piece so the sum can be compared with the whole.
"""

from __future__ import annotations

import time

import torch
import torch.nn.functional as F


def per_call_us(fn, calls: int = 300, rounds: int = 5) -> float:
    """Best of `rounds` of the mean over `calls` calls, in microseconds (after a warm-up)."""
    for _ in range(20):
        fn()
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter() - start) / calls)
    return best * 1e6


def main():
    torch.set_num_threads(1)
    x = torch.randn(16, 32000)  # one chunk: 16 rows of a 32000-token vocabulary
    m = x.amax(-1, keepdim=True)
    tmp = torch.empty_like(x)
    tokens = torch.zeros(16, dtype=torch.long)
    rows = [
        ("torch.logsumexp(x, -1)", lambda: x.logsumexp(-1)),
        ("  amax(x, -1)", lambda: x.amax(-1, keepdim=True)),
        ("  x - max (new tensor)", lambda: x - m),
        ("  exp_ (in place)", lambda: tmp.copy_(x).exp_()),
        ("  sum(-1)", lambda: x.sum(-1)),
        ("torch.log_softmax(x, -1) (fused)", lambda: F.log_softmax(x, -1)),
        ("torch.softmax(x, -1) (fused)", lambda: torch.softmax(x, -1)),
        ("-F.cross_entropy(x, t, reduction='none')", lambda: F.cross_entropy(x, tokens, reduction="none")),
        ("copy_ (memory traffic only)", lambda: tmp.copy_(x)),
    ]
    print(f"torch {torch.__version__}, 1 thread, x (16, 32000) float32; microseconds per call (best of 5)")
    for label, fn in rows:
        print(f"{label:45s} {per_call_us(fn):8.0f}")


if __name__ == "__main__":
    main()
