"""The command line of both twins (grpo_support.run_cli), run as a user would: `python grpo_fixed.py [--steps N]
[--seed S] [--json]`."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

import grpo_buggy
import grpo_fixed
import grpo_support

ROOT = Path(grpo_fixed.__file__).resolve().parent
TWINS = {"fixed": grpo_fixed, "buggy": grpo_buggy}


def main(twin, argv):
    """The twin's command line in-process (no interpreter start-up): what `python grpo_<twin>.py argv` runs."""
    module = TWINS[twin]
    return grpo_support.run_cli(module.train, module.make_config, module.__doc__.splitlines()[0], argv)


def run_cli(twin, *args):
    """Run the twin's script with `args`; -> CompletedProcess (text)."""
    return subprocess.run([sys.executable, str(ROOT / f"grpo_{twin}.py"), *map(str, args)], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("twin", TWINS)
def test_json_summary_is_the_last_line(twin):
    proc = run_cli(twin, "--steps", 3, "--seed", 1, "--json")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().splitlines()
    summary = json.loads(lines[-1])
    assert isinstance(summary, dict)
    assert set(summary) == {"final_reward", "steps", "nan_losses", "seconds"}
    assert summary["steps"] == 3
    assert isinstance(summary["nan_losses"], int) and 0 <= summary["nan_losses"] <= 3
    if twin == "fixed":
        assert summary["nan_losses"] == 0
    assert 0.0 <= summary["final_reward"] <= 1.0
    assert isinstance(summary["seconds"], (int, float)) and math.isfinite(summary["seconds"])
    assert not any(line.startswith("iter") for line in lines), "--json prints no progress lines"
    assert "WARNING" not in proc.stderr, proc.stderr
    # the same run in-process gives the same reward: one thread and a seeded generator make it deterministic
    history = TWINS[twin].train(seed=1, steps=3)
    in_process = grpo_support.summarize_run(history, 0.0)
    assert summary["final_reward"] == pytest.approx(in_process["final_reward"], abs=1e-9)
    assert summary["nan_losses"] == in_process["nan_losses"]


@pytest.mark.parametrize("twin", TWINS)
def test_progress_lines_without_json(twin):
    proc = run_cli(twin, "--steps", 3)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().splitlines()
    progress = [line for line in lines if line.startswith("iter")]
    assert [line.split()[1] for line in progress] == ["0", "2"], lines  # every 10th and the last iteration
    assert all("reward" in line and "loss" in line for line in progress)
    assert lines[-1].startswith("final reward") and "3 iterations" in lines[-1]
    with pytest.raises(json.JSONDecodeError):
        json.loads(lines[-1])


def test_steps_zero_is_a_usage_error():
    proc = run_cli("fixed", "--steps", 0, "--json")
    assert proc.returncode == 2  # argparse's usage error
    assert "--steps" in proc.stderr
    assert proc.stdout == ""


@pytest.mark.parametrize("twin", TWINS)
@pytest.mark.parametrize("argv", [["--steps", "0"], ["--steps", "-1"], ["--steps", "two"], ["--bogus"]])
def test_bad_arguments_exit_with_usage_error(twin, argv, capsys):
    """In-process (no interpreter start-up): the same argparse path as the subprocess test above."""
    with pytest.raises(SystemExit) as exc:
        main(twin, [*argv, "--json"])
    assert exc.value.code == 2
    err = capsys.readouterr()
    assert "usage" in err.err and err.out == ""


@pytest.mark.parametrize("twin", TWINS)
def test_main_in_process_returns_the_summary(twin, capsys):
    summary = main(twin, ["--steps", "1", "--json", "--seed", "2"])
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1]) == summary


@pytest.mark.parametrize("twin", TWINS)
def test_every_config_field_is_a_flag(twin, capsys):
    """--group_size 3 --prompts_per_batch 2 is the B != G experiment as a plain command."""
    summary = main(twin, ["--steps", "2", "--group_size", "3", "--prompts_per_batch", "2", "--json"])
    history = TWINS[twin].train(seed=0, steps=2, group_size=3, prompts_per_batch=2)
    assert summary["final_reward"] == pytest.approx(grpo_support.summarize_run(history, 0.0)["final_reward"])
    flags = capsys.readouterr()
    assert flags.err == ""


@pytest.mark.parametrize("argv, message", [
    (["--group_size", "1"], "group_size must be"),
    (["--clip", "nan"], "clip must be"),
    (["--group_size", "2.5"], "expected int"),
    (["--strict", "maybe"], "expected true or false"),
    (["--group_sizes", "3"], "unrecognized arguments"),
])
def test_bad_config_values_are_usage_errors(argv, message, capsys):
    with pytest.raises(SystemExit) as exc:
        main("fixed", [*argv, "--json"])
    assert exc.value.code == 2 and message in capsys.readouterr().err


def test_progress_line_shows_the_statistics_that_separate_the_twins():
    line = run_cli("buggy", "--steps", 1).stdout.splitlines()[0]
    for stat in ("logprob_gap", "adv_nonfinite", "ratio_last_maxdev", "clip_frac_pos", "grad_norm"):
        assert stat in line
