"""The command line behind the make targets: `python -m interview mock|grade|hint|scratch|drill ...`.

  make mock [ROUND=N] [BUGS=k|all] [HARD=1]   write practice/round_N.py: the hand-out with k bugs left in
  make grade [FILE=path] [REVEAL=1]            how many of the file's bugs are fixed (naming only those), and
                                               what a fix broke; REVEAL=1 names the remaining ones too;
                                               a practice/scratch_N.py is graded sentence by sentence
  make hint [FILE=path] [LEVEL=1|2|3] [N=k]    the hint for the k-th bug still remaining (ALL=1: every one)
  make scratch [FUNCS=a,b|all]                 write practice/scratch_N.py: functions to write from scratch
  make drill [REPORT=1] [TOPIC=t] [WEAKEST=1] [ID=a,b] [SEED=n] [SCORES=path] [EXPORT=cards.md]
                                               the discussion drill, your scores per topic, or the bank as Markdown
  make progress                                what the practice log (practice/history.jsonl) says
  make interview                               a round with a 45-minute countdown, then the questions
`grade` exits 0 when everything is fixed (or passes) and nothing regressed, 1 otherwise, 2 when a file
cannot be graded; `make` itself turns any failure into 2. Bad input is one line on stderr, exit code 2.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
from pathlib import Path

import torch

from interview import drill, grading, hints, history, interview_mode, rounds, scratch, scratch_grader
from interview.sandbox import CannotGrade


def is_scratch_file(file: str | None) -> bool:
    return bool(file) and re.fullmatch(r"scratch_.*\.py", Path(file).name) is not None


def grade_command(files: list[str | None], as_json: bool = False, train: bool = True, reveal: bool = False) -> int:
    """Grade each file (a scratch_*.py goes to the scratch grader); print the report (naming only fixed bugs,
    the remaining ones too with `reveal`), or with `as_json` one JSON line per mock-graded file (`status`
    names every bug: the machine interface, a reveal). Returns the largest exit code."""
    outputs, jobs = {}, {}
    for i, file in enumerate(files):
        if is_scratch_file(file):
            outputs[i] = dict(file=file, code=scratch_grader.grade(file, train=train), lines=[])
            continue
        try:
            jobs[i] = grading.make_job(file)
        except CannotGrade as e:
            outputs[i] = dict(file=file, code=2, lines=[f"cannot grade {e}"])
    results = grading.grade_jobs(list(jobs.values())) if jobs else []
    for (i, job), result in zip(jobs.items(), results, strict=True):
        lines, code = grading.report(job, result, reveal=reveal)
        status = result.get("status")
        outputs[i] = dict(file=rounds.rel(job.path), code=code, lines=lines, status=status,
                          regressions=result.get("regressions"), crashes=result.get("crashes"))
        interview_mode.graded(job, status, code, result.get("regressions"))
    for i in sorted(outputs):
        out = outputs[i]
        if as_json:
            print(json.dumps(out))
        elif out["lines"]:
            print("\n".join(out["lines"]), file=sys.stderr if out["code"] == 2 else sys.stdout, flush=True)
    if not as_json and len(jobs) == 1:
        interview_mode.print_countdown(next(iter(jobs.values())).path)
    return max(out["code"] for out in outputs.values())


def hint_command(file: str | None, level: str, which: str = "1", every: bool = False) -> int:
    if level.strip() not in ("1", "2", "3"):
        raise CannotGrade(f"LEVEL must be 1, 2 or 3, got {level!r}")
    if not which.strip().isdigit() or int(which) < 1:
        raise CannotGrade(f"N must be a hint number 1, 2, ..., got {which!r}")
    job = grading.make_job(file)
    lines, code = hints.hint(job.bugs, grading.grade_jobs([job])[0], int(level), None if every else int(which))
    print("\n".join(lines), file=sys.stderr if code == 2 else sys.stdout)
    interview_mode.hinted(job, int(level), code, lines)
    return code


def scratch_command(funcs: str | None, out_dir: str | None) -> int:
    try:
        path = scratch.new_scratch(funcs, out_dir)
    except ValueError as error:
        print(f"make scratch: {error}", file=sys.stderr)
        return 2
    shown = rounds.rel(path)
    print(f"wrote {shown}: write {', '.join(scratch.parse_funcs(funcs))}, then: make grade FILE={shown}")
    return 0


def drill_command(args, stdin=None, stdout=None) -> int:
    out = stdout or sys.stdout
    try:
        bank = drill.load_bank(args.bank)
        legacy = drill.LEGACY_SCORES_PATH if Path(args.scores) == drill.SCORES_PATH else None
        store = drill.ScoreStore(args.scores, bank, legacy=legacy)
        bank = drill.filter_topic(bank, args.topic)
        bank = drill.filter_ids(bank, args.id)
    except drill.DrillError as error:
        print(f"make drill: {error}", file=sys.stderr)
        return 2
    if args.export:
        Path(args.export).write_text(drill.export_markdown(bank))
        print(f"wrote {len(bank)} cards to {args.export}", file=out)
        return 0
    if args.report:
        print(drill.report(bank, store), file=out)
        return 0
    drill.run(bank, store, random.Random(args.seed), stdin=stdin, stdout=out, weakest=args.weakest or bool(args.id))
    return 0


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="python -m interview", description=__doc__.splitlines()[0])
    sub = top.add_subparsers(dest="command", required=True)
    p = sub.add_parser("mock", help="draw a mock round into practice/round_N.py")
    p.add_argument("--round", type=int, default=None, help="round number N (default: the next unused one)")
    p.add_argument("--bugs", default=str(rounds.DEFAULT_BUGS), help=f"bugs left in (default {rounds.DEFAULT_BUGS}, "
                                                                     "or all)")
    p.add_argument("--hard", action="store_true", help="keep only the first sentence of each docstring (whole lines)")
    p = sub.add_parser("grade", help="grade files (default: the newest round)")
    p.add_argument("files", nargs="*", help="files to grade (several rounds share one grading process)")
    p.add_argument("--json", action="store_true", help="one JSON line per graded round or hand-out")
    p.add_argument("--no-train", action="store_true", help="scratch files: skip the training run")
    p.add_argument("--reveal", action="store_true",
                   help="also name the bugs still remaining and the functions an edit broke "
                        "(make grade REVEAL=1)")
    p = sub.add_parser("hint", help="hints for the bugs a file still has")
    p.add_argument("file", nargs="?", default=None)
    p.add_argument("--level", default="1", help="1: symptom and statistic, 2: function and tiny input, 3: the fix")
    p.add_argument("--which", default="1", help="which remaining bug's hint (1, 2, ...; make hint N=2)")
    p.add_argument("--all", action="store_true", help="every remaining bug's hint (make hint ALL=1)")
    p = sub.add_parser("scratch", help="write the next practice/scratch_N.py")
    p.add_argument("--funcs", default=None, help=f"comma-separated catalog sites, or 'all' (default: "
                                                 f"{','.join(scratch.SPEC_FUNCS)})")
    p.add_argument("--out-dir", default=None, help="default: practice/")
    p = sub.add_parser("drill", help="the discussion drill")
    p.add_argument("--report", action="store_true", help="per-topic scores instead of a drill")
    p.add_argument("--seed", type=int, default=None, help="seed of the question draw (default: random)")
    p.add_argument("--topic", default=None, help=f"only this topic's cards: {', '.join(drill.TOPICS)}")
    p.add_argument("--weakest", action="store_true", help="weakest cards first, due or not")
    p.add_argument("--id", default=None, help="only these cards: comma-separated ids (make drill ID=a,b)")
    p.add_argument("--export", default=None, metavar="PATH",
                   help="write the cards (after TOPIC/ID) to a Markdown file instead of drilling")
    p.add_argument("--scores", default=str(drill.SCORES_PATH), help="the log answers go to (default "
                                                                     "practice/history.jsonl)")
    p.add_argument("--bank", default=str(drill.BANK_PATH), help=argparse.SUPPRESS)
    sub.add_parser("progress", help="what the practice log says: rounds, hints, drill scores over days")
    p = sub.add_parser("interview", help="a 3-bug round with a 45-minute countdown, then 15 minutes of questions")
    p.add_argument("--hard", action="store_true", help="keep only the first sentence of each docstring (whole lines)")
    return top


def main(argv=None, stdin=None, stdout=None) -> int:
    args = parser().parse_args(argv)
    sys.dont_write_bytecode = True
    torch.set_num_threads(1)
    if args.command == "drill":
        return drill_command(args, stdin, stdout)
    if args.command == "progress":
        print(history.progress(history.read(interview_mode.log_path())), file=stdout or sys.stdout)
        return 0
    if args.command == "interview":
        try:
            return interview_mode.interview(stdin, stdout, hard=args.hard)
        except (CannotGrade, drill.DrillError) as e:
            print(f"make interview: {e}", file=sys.stderr)
            return 2
    if args.command == "scratch":
        return scratch_command(args.funcs, args.out_dir)
    if args.command == "grade":
        return grade_command(args.files or [None], args.json, train=not args.no_train, reveal=args.reveal)
    try:
        if args.command == "mock":
            interview_mode.drawn(rounds.mock(args.round, args.bugs, args.hard))
            return 0
        return hint_command(args.file, args.level, args.which, args.all)
    except CannotGrade as e:
        print(("" if args.command == "mock" else "cannot grade ") + str(e), file=sys.stderr)
        return 2
