"""`make bench`: token_logprobs against public implementations, CLI wall time, notebook times, slider redraws.

  .venv/bin/python bench/run.py             everything (about 10 minutes on a quiet 2-core machine)
  .venv/bin/python bench/run.py --quick     small logits (4x64x32000), no torch.compile, 1 CLI run
  .venv/bin/python bench/run.py --only cli notebooks
  .venv/bin/python bench/run.py --only redraw   slider redraws in JupyterLab in Chromium (bench/redraw_bench.py)
  .venv/bin/python bench/run.py --only practice   make grade on a mock round and on the whole catalog
  .venv/bin/python bench/why_logsumexp.py  per-op timings: why logsumexp is slower than log_softmax on CPU

Results go to bench/results/*.json (gitignored); the last lines printed are the summary.
The machine may be shared: every number is a median, and the load average is recorded with it.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import cli_bench
import notebook_bench
import practice_bench
import redraw_bench
import reference_impls
from logprobs_bench import OURS

BENCH = Path(__file__).resolve().parent
RESULTS = BENCH / "results"
PARTS = ("logprobs", "cli", "notebooks", "redraw", "practice")
MB = 1 << 20


def say(msg: str) -> None:
    print(msg, flush=True)


# ---- token_logprobs ------------------------------------------------------------------------------


MMAP_EVERY_TENSOR = {"MALLOC_MMAP_THRESHOLD_": "65536"}
"""environment of the memory subprocesses: each tensor buffer its own mmap, so RSS tracks live tensors"""


def run_logprobs(args) -> dict:
    """The measurement subprocesses of logprobs_bench.py: time, memory (per-tensor mmap), and memory
    again for one long sequence (--long-shape, B = 1), where chunking by batch rows alone cannot help."""
    runs = [("time", args.shape, {}), ("memory", args.shape, MMAP_EVERY_TENSOR)]
    if args.long_shape:
        runs.append(("memory_long", args.long_shape, MMAP_EVERY_TENSOR))
    out = {}
    for name, shape, extra_env in runs:
        path = RESULTS / f"token_logprobs_{name}.json"
        cmd = [sys.executable, str(BENCH / "logprobs_bench.py"), "--measure", name.split("_")[0], "--out", str(path),
               "--shape", shape, "--threads", str(args.threads)]
        cmd += ["--no-compile"] if args.no_compile or name == "memory_long" else []
        cmd += ["--repeats", str(args.repeats)] if name == "time" else []
        say(f"[token_logprobs] {name}, logits {shape} float32, {args.threads} thread(s)")
        subprocess.run(cmd, check=True, env={**os.environ, **extra_env}, timeout=3600)
        out[name] = json.loads(path.read_text())
    return out


def long_memory_table(data: dict) -> list[str]:
    meta, memory = data["meta"], data["results"]
    if "unavailable" in memory:
        return [f"memory (long sequence): {memory['unavailable']}"]
    L = meta["logits_bytes"]
    lines = [f"one long sequence: logits {'x'.join(map(str, meta['shape']))} float32 = {L / MB:.0f} MiB (= L), "
             f"measured {meta['measured_at']}",
             f"{'implementation':40s} {'fwd peak MiB':>16s} {'kept for bwd MiB':>16s} {'fwd+bwd peak MiB':>16s}"]
    for label, m in memory.items():
        lines.append(f"{label:40s} {_mb(m['forward_peak_bytes'], L):>16s} {_mb(m['graph_kept_bytes'], L):>16s} "
                     f"{_mb(m['forward_backward_peak_bytes'], L):>16s}")
    return lines


def _mb(nbytes, logits_bytes) -> str:
    return f"{nbytes / MB:7.0f} ({nbytes / logits_bytes:4.2f}L)"


def logprobs_table(data: dict) -> list[str]:
    timing, memory = data["time"]["results"], data["memory"]["results"]
    meta = data["time"]["meta"]
    L = meta["logits_bytes"]
    lines = [
        f"token_logprobs, logits {'x'.join(map(str, meta['shape']))} float32 = {L / MB:.0f} MiB (= L), "
        f"{meta['threads']} thread(s), torch {meta['torch']}, measured {meta['measured_at']}, "
        f"load avg {meta['loadavg_start'][0]:.1f} -> {meta['loadavg_end'][0]:.1f} on {meta['cores']} cores",
        f"{'implementation':40s} {'fwd ms':>8s} {'fwd+bwd ms':>10s} {'fwd peak MiB':>16s} {'kept for bwd MiB':>16s} "
        f"{'fwd+bwd peak MiB':>16s} {'max err':>8s} {'1e4 ok':>6s}",
    ]
    for label, t in timing.items():
        m = memory.get(label) if isinstance(memory, dict) else None
        mem = (f"{_mb(m['forward_peak_bytes'], L):>16s} {_mb(m['graph_kept_bytes'], L):>16s} "
               f"{_mb(m['forward_backward_peak_bytes'], L):>16s}") if m else f"{'n/a':>16s} " * 3
        err = t["max_abs_err_vs_f64"]
        err = f"{err:8.1e}" if isinstance(err, float) else f"{err:>8s}"
        lines.append(f"{label:40s} {t['forward_median_s'] * 1e3:8.0f} {t['forward_backward_median_s'] * 1e3:10.0f} "
                     f"{mem} {err} {'yes' if t['stable_1e4'] else 'NO':>6s}")
    if meta.get("compile", "ok") != "ok":
        lines.append(f"torch.compile row left out: {meta['compile']}")
    if "unavailable" in memory:
        lines.append(f"memory: {memory['unavailable']}")
    lines.append("fwd = forward under no_grad; fwd+bwd = forward with autograd + backward; peaks are resident memory")
    lines.append("beyond the inputs (fwd+bwd includes logits.grad = 1 L); kept = held between forward and backward.")
    lines += verdict(timing)
    return lines


def verdict(timing: dict) -> list[str]:
    ours = next(t for label, t in timing.items() if label == OURS or label.endswith("(ours)"))  # older runs' label
    lines = []
    for group, labels in (("eager public", reference_impls.PUBLIC), ("compiled public", reference_impls.COMPILED)):
        present = [k for k in labels if k in timing]
        for key, name in (("forward_median_s", "fwd"), ("forward_backward_median_s", "fwd+bwd")):
            if not present:
                continue
            best = min(present, key=lambda k: timing[k][key])
            ratio = ours[key] / timing[best][key]
            lines.append(f"ours / best {group} ({best}) {name}: {ratio:.2f}x "
                         + ("(ours at least as fast)" if ratio <= 1.0 else "(ours SLOWER)"))
    return lines


# ---- CLI and notebooks ---------------------------------------------------------------------------


def cli_table(results: dict) -> list[str]:
    load = next(iter(results.values())).get("loadavg", [float("nan")] * 2)
    lines = [f"CLI wall time, median of runs; load avg {load[0]:.1f} -> {load[1]:.1f}",
             f"{'CLI run (--json, default 70 iterations)':40s} {'wall median s':>14s} {'train s':>8s} {'runs':>24s} "
             f"{'budget':>7s}  final_reward"]
    for script, r in results.items():
        runs = " ".join(f"{s:.1f}" for s in r["wall_s"])
        ok = "ok" if r["wall_median_s"] <= r["budget_s"] else "OVER"
        rewards = " ".join(f"{x:.3f}" for x in r["final_reward"])
        lines.append(f"{script:40s} {r['wall_median_s']:14.2f} {r['train_median_s']:8.2f} {runs:>24s} "
                     f"{ok:>7s}  {rewards}")
    return lines


def notebook_table(results: list[dict]) -> list[str]:
    if not results:
        return ["notebooks: none found (notebooks/NN_*.ipynb)"]
    lines = [f"{'notebook':40s} {'cells s':>8s} {'kernel s':>8s} {'budget':>7s}  slowest redraw (kernel side)"]
    for r in results:
        redraws = (r.get("redraw") or {}).get("timed", [])
        slowest = max(redraws, key=lambda x: x["median_s"], default=None)
        redraw = f"{slowest['median_s']:.2f} s ('{slowest['control']}')" if slowest else "no slider found"
        status = "ERROR" if r["error"] else ("ok" if r["cells_s"] <= r["budget_s"] else "OVER")
        lines.append(f"{r['notebook']:40s} {r['cells_s']:8.1f} {r['kernel_start_s']:8.1f} {status:>7s}  {redraw}"
                     + (f"  {r['error']}" if r["error"] else ""))
    return lines


def readme_notebook_table(notebooks: list[dict], redraws: list[dict]) -> list[str]:
    """The README's notebook table (markdown): run time (nbclient) and browser redraw median / worst."""
    by_name = {r["notebook"]: r for r in redraws}
    lines = ["README table (markdown):", "| notebook | run time | redraw median | redraw worst |",
             "| --- | --- | --- | --- |"]
    for r in notebooks:
        d = by_name.get(r["notebook"], {})
        median = f"{d['median_s']:.2f} s" if "median_s" in d else "n/a"
        worst = f"{d['worst_s']:.2f} s" if "worst_s" in d else "n/a"
        lines.append(f"| {r['notebook'].removesuffix('.ipynb')} | {r['cells_s']:.1f} s | {median} | {worst} |")
    return lines


# ---- main ----------------------------------------------------------------------------------------


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small logits, no compile, one CLI run per twin")
    parser.add_argument("--only", nargs="+", choices=PARTS, default=list(PARTS))
    parser.add_argument("--shape", default=None, help="B,T,V of the logits (default 16,256,32000)")
    parser.add_argument("--long-shape", default=None,
                        help="B,T,V of a single long sequence for a second memory run (default 1,4096,32000; "
                             "none with --quick; '' to skip)")
    parser.add_argument("--repeats", type=int, default=None, help="timed repeats per implementation (default 5)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads for token_logprobs (project: 1)")
    parser.add_argument("--no-compile", action="store_true", help="skip the torch.compile implementation")
    parser.add_argument("--cli-runs", type=int, default=None, help="runs per twin (default 3)")
    parser.add_argument("--show", action="store_true", help="only print the tables of the last run's summary.json")
    args = parser.parse_args(argv)
    args.shape = args.shape or ("4,64,32000" if args.quick else "16,256,32000")
    args.repeats = args.repeats or (3 if args.quick else 5)
    if args.long_shape is None:
        args.long_shape = "" if args.quick else "1,4096,32000"
    args.cli_runs = args.cli_runs or (1 if args.quick else 3)
    args.no_compile = args.no_compile or args.quick
    return args


def tables(summary: dict) -> list[list[str]]:
    sections = []
    if "token_logprobs" in summary:
        sections.append(logprobs_table(summary["token_logprobs"]))
        if "memory_long" in summary["token_logprobs"]:
            sections.append(long_memory_table(summary["token_logprobs"]["memory_long"]))
    if "cli" in summary:
        sections.append(cli_table(summary["cli"]))
    if "notebooks" in summary:
        sections.append(notebook_table(summary["notebooks"]))
    if "redraw" in summary:
        sections.append(redraw_bench.redraw_table(summary["redraw"]))
    if "notebooks" in summary and "redraw" in summary:
        sections.append(readme_notebook_table(summary["notebooks"], summary["redraw"]))
    if "practice" in summary:
        sections.append(practice_bench.practice_table(summary["practice"]))
    return sections


def main(argv=None):
    args = parse_args(argv)
    if args.show:
        summary = json.loads((RESULTS / "summary.json").read_text())
        say(f"bench run started {summary['started']}, finished {summary['finished']}")
        for lines in tables(summary):
            say("\n".join(lines) + "\n")
        return
    RESULTS.mkdir(parents=True, exist_ok=True)
    started = time.strftime("%Y-%m-%d %H:%M:%S %Z")
    say(f"bench started {started}, load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    summary = dict(started=started, args=vars(args))
    if "logprobs" in args.only:
        summary["token_logprobs"] = run_logprobs(args)
        say("\n".join(logprobs_table(summary["token_logprobs"])))
    if "cli" in args.only:
        say(f"[cli] python grpo_*.py --json, {args.cli_runs} run(s) each")
        summary["cli"] = cli_bench.bench_cli(args.cli_runs, progress=say)
        (RESULTS / "cli.json").write_text(json.dumps(summary["cli"], indent=1))
    if "notebooks" in args.only:
        say("[notebooks] execute each notebooks/NN_*.ipynb (a temporary copy), then time its sliders")
        summary["notebooks"] = notebook_bench.bench_notebooks(progress=say)
        (RESULTS / "notebooks.json").write_text(json.dumps(summary["notebooks"], indent=1))
    if "redraw" in args.only:
        say("[redraw] JupyterLab in Chromium: run all, check figures against sliders, time key press -> new image")
        summary["redraw"] = redraw_bench.bench_redraws(progress=say)
        (RESULTS / "redraw.json").write_text(json.dumps(summary["redraw"], indent=1))
    if "practice" in args.only:
        say(f"[practice] make grade on a fresh mock round and on grpo_buggy.py, {args.cli_runs} run(s) each")
        summary["practice"] = practice_bench.bench_practice(args.cli_runs, progress=say)
        (RESULTS / "practice.json").write_text(json.dumps(summary["practice"], indent=1))
    summary["finished"] = time.strftime("%Y-%m-%d %H:%M:%S %Z")
    summary["loadavg_end"] = list(os.getloadavg())
    (RESULTS / "summary.json").write_text(json.dumps(summary, indent=1))
    say(f"\n===== summary (started {started}, finished {summary['finished']}, "
        f"load average now {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores) =====")
    for lines in tables(summary):
        say("\n".join(lines) + "\n")
    say(f"results: {RESULTS}/*.json")


if __name__ == "__main__":
    main()
