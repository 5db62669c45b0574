"""The practice round: mock rounds drawn from the bug catalog, their grader and hints, from-scratch
exercises graded sentence by sentence of the spec (SPEC.md), and the discussion drill.

    python -m interview mock|grade|hint|scratch|drill|progress|interview ...   (the make targets of the same names)

Modules, lowest first (each imports only modules above it, and `workbook` and the twins):
  history        the practice log (practice/history.jsonl, append-only) and `make progress`
  splice         source splicing: replace top-level functions of a module's source text
  sandbox        the grading sandbox: loading a file, time limits, the pytest plugin, a forked process
  rounds         the draw, the round's header and source, `make mock`
  spec           the spec's sentences by key, read from SPEC.md
  verdicts       which bugs are fixed, regressions, the report of `make grade`
  grading        the mock grader: what a file is graded on, the grading process
  hints          `make hint`: three levels of hint per remaining bug
  checks         a small test framework of cases that print yours beside expected
  spec_cases     the cases of each spec sentence
  scratch        `make scratch`: the stub file
  scratch_grader the from-scratch grader
  drill          the discussion drill: the bank (questions.toml), a schedule with due dates, a terminal loop
  drill_card     the drill's card widget for notebook 00
  interview_mode `make interview`: a round with a 45-minute countdown, then the questions and a write-up
  cli            the command line
"""
