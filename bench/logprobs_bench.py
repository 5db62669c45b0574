"""token_logprobs: speed, peak extra memory and numerical stability against public implementations.

Run by bench/run.py as two subprocesses, because the two measurements want different allocators:
  --measure time    forward under no_grad (how old / reference log-probs are computed) and forward +
                    backward (the training call), median of --repeats after a warm-up, implementations
                    interleaved round by round in a shuffled order, so load from other processes and
                    the allocator state left by the previous implementation hit them all alike;
                    also the max error against a float64 reference and a large-logit stability probe.
  --measure memory  peak extra resident memory. torch's CPU allocator has no statistics and
                    tracemalloc does not see it, so we reset the kernel's high-water mark
                    (/proc/self/clear_refs, "5") and read VmHWM from /proc/self/status around each
                    call. run.py starts this process with MALLOC_MMAP_THRESHOLD_=65536 so every
                    tensor buffer is its own mmap and resident memory tracks live tensors exactly.
Each writes one JSON file: {"meta": {...}, "results": {label: {...}}}.
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import json
import math
import os
import platform
import random
import statistics
import time
from pathlib import Path

import alternatives
import reference_impls
import token_logprobs as kernel
import torch

import grpo_buggy

OURS = "bench/token_logprobs.py (ours)"
BUGGY = "grpo_buggy.token_logprobs (B7)"


def implementations(compiled: bool, info: dict) -> dict:
    """label -> fn(logits (..., T, V), tokens (..., T)) -> (..., T); info["compile"] says why compile is out."""
    impls = {OURS: kernel.token_logprobs, **reference_impls.PUBLIC}
    problem = reference_impls.compile_problem() if compiled else "skipped (--no-compile)"
    info["compile"] = problem or "ok"
    if problem:
        print(f"  torch.compile implementation left out: {problem}", flush=True)
    else:
        impls.update(reference_impls.COMPILED)
    impls.update(alternatives.PROTOTYPES)
    impls[BUGGY] = grpo_buggy.token_logprobs
    return impls


def make_inputs(shape, seed=0):
    """logits (B, T, V) ~ 2 * N(0, 1) float32, tokens (B, T) uniform; the logits are touched (resident)."""
    g = torch.Generator().manual_seed(seed)
    logits = 2 * torch.randn(*shape, generator=g)  # (B, T, V)
    tokens = torch.randint(0, shape[-1], shape[:-1], generator=g)  # (B, T)
    return logits, tokens


def reference_logprobs(logits, tokens):
    """float64 log_softmax + gather, one batch row at a time (so only a (T, V) float64 temporary). (B, T)"""
    rows = zip(logits, tokens, strict=True)
    return torch.stack([reference_impls.naive_log_softmax_gather(row.double(), tok) for row, tok in rows])


def stability_probe(fn) -> bool:
    """Finite and accurate on logits of magnitude 1e4 (softmax underflows to 0 for most tokens there)."""
    g = torch.Generator().manual_seed(1)
    logits = 1e4 * torch.randn(2, 3, 50, generator=g)  # (2, 3, 50)
    tokens = torch.randint(0, 50, (2, 3), generator=g)
    with torch.no_grad():
        out = fn(logits, tokens).double()
    ref = reference_logprobs(logits, tokens)
    return bool(out.isfinite().all()) and bool(((out - ref).abs() <= 1e-5 * ref.abs() + 1e-3).all())


def forward_seconds(fn, logits, tokens) -> float:
    with torch.no_grad():
        start = time.perf_counter()
        fn(logits, tokens)
        return time.perf_counter() - start


def forward_backward_seconds(fn, logits, tokens, grad_out) -> float:
    """logits must require grad; its .grad is reset before each call."""
    logits.grad = None
    start = time.perf_counter()
    fn(logits, tokens).backward(grad_out)
    return time.perf_counter() - start


def shuffled(impls: dict, seed: int) -> list:
    """The (label, fn) pairs in a per-round order: who runs after whom (e.g. after an implementation
    that just freed 1 GB) changes its time, so no implementation always follows the same one."""
    pairs = list(impls.items())
    random.Random(seed).shuffle(pairs)
    return pairs


def measure_time(impls, shape, repeats):
    logits, tokens = make_inputs(shape)
    grad_out = torch.randn(tokens.shape)  # (B, T), fixed upstream gradient
    ref = reference_logprobs(logits, tokens)
    results = {}
    for label, fn in impls.items():
        print(f"  warm-up + accuracy: {label}", flush=True)
        with torch.no_grad():
            out = fn(logits, tokens)
            fn(logits, tokens)
        err = (out.double() - ref).abs().max().item()
        results[label] = dict(max_abs_err_vs_f64=err if math.isfinite(err) else str(err),
                              stable_1e4=stability_probe(fn), forward_s=[], forward_backward_s=[])
    for rep in range(repeats):
        print(f"  forward (no_grad) round {rep + 1}/{repeats}", flush=True)
        for label, fn in shuffled(impls, rep):
            results[label]["forward_s"].append(forward_seconds(fn, logits, tokens))
    logits.requires_grad_(True)
    for fn in impls.values():  # warm-up of the autograd path (compiles the backward graph too)
        forward_backward_seconds(fn, logits, tokens, grad_out)
    for rep in range(repeats):
        print(f"  forward+backward round {rep + 1}/{repeats}", flush=True)
        for label, fn in shuffled(impls, rep):
            results[label]["forward_backward_s"].append(forward_backward_seconds(fn, logits, tokens, grad_out))
    for r in results.values():
        r["forward_median_s"] = statistics.median(r["forward_s"])
        r["forward_backward_median_s"] = statistics.median(r["forward_backward_s"])
    return results


# ---- memory -------------------------------------------------------------------------------------

_LIBC = ctypes.CDLL("libc.so.6") if platform.system() == "Linux" else None


def _status_kb(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise KeyError(field)


def _settle_and_reset_peak() -> int:
    """Free what can be freed, reset the resident high-water mark; -> current resident bytes."""
    gc.collect()
    if _LIBC is not None:
        _LIBC.malloc_trim(0)
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    return _status_kb("VmRSS") * 1024


def _peak_bytes() -> int:
    return _status_kb("VmHWM") * 1024


def memory_available() -> str | None:
    """None if the high-water mark can be reset here, else the reason it cannot."""
    try:
        _settle_and_reset_peak()
        _peak_bytes()
    except OSError as e:
        return f"cannot reset the resident high-water mark: {e}"
    return None


def measure_memory(impls, shape):
    """Per implementation, in bytes beyond what was resident before the call:
    forward_peak (no_grad); graph_kept (held after a grad-enabled forward: tensors saved for
    backward, minus the output); forward_backward_peak (includes logits.grad, one logits-sized
    tensor that every implementation must produce)."""
    logits, tokens = make_inputs(shape)
    grad_out = torch.randn(tokens.shape)
    results = {}
    for label, fn in impls.items():
        print(f"  memory: {label}", flush=True)
        with torch.no_grad():  # warm-up (and compile) outside the measurement
            fn(logits, tokens)
        base = _settle_and_reset_peak()
        with torch.no_grad():
            out = fn(logits, tokens)
        forward_peak = _peak_bytes() - base
        del out

        logits.requires_grad_(True)
        forward_backward_seconds(fn, logits, tokens, grad_out)  # warm-up of the autograd path
        logits.grad = None
        base = _settle_and_reset_peak()
        out = fn(logits, tokens)
        gc.collect()
        kept = _status_kb("VmRSS") * 1024 - base - out.nbytes
        out.backward(grad_out)
        forward_backward_peak = _peak_bytes() - base
        del out
        logits.grad = None
        logits.requires_grad_(False)
        results[label] = dict(forward_peak_bytes=forward_peak, graph_kept_bytes=max(0, kept),
                              forward_backward_peak_bytes=forward_backward_peak)
    return results


# ---- entry point ---------------------------------------------------------------------------------


def meta(shape, threads):
    return dict(
        measured_at=time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        shape=list(shape),
        dtype="float32",
        logits_bytes=4 * math.prod(shape),
        torch=torch.__version__,
        threads=threads,
        cpu=platform.processor() or platform.machine(),
        cores=os.cpu_count(),
        loadavg_start=list(os.getloadavg()),
        fixed_chunk_elements=kernel.LOGPROB_CHUNK,
    )


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--measure", choices=["time", "memory"], required=True)
    parser.add_argument("--shape", default="16,256,32000", help="B,T,V of the logits")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads (the project uses 1)")
    parser.add_argument("--no-compile", action="store_true", help="skip the torch.compile implementation")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    shape = tuple(int(s) for s in args.shape.split(","))
    info = meta(shape, args.threads)
    impls = implementations(not args.no_compile, info)
    if args.measure == "time":
        results = measure_time(impls, shape, args.repeats)
    else:
        reason = memory_available()
        results = {"unavailable": reason} if reason else measure_memory(impls, shape)
        info["malloc_mmap_threshold"] = os.environ.get("MALLOC_MMAP_THRESHOLD_")
    info["loadavg_end"] = list(os.getloadavg())
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(dict(meta=info, results=results), indent=1))


if __name__ == "__main__":
    main()
