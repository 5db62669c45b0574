# make lab   : set up .venv if needed, open JupyterLab at the repository root with notebooks/00_practice.ipynb
# make test  : ruff, the test suite (browser tests skip without Debian's chromium), and nbval on every notebook
# make sft   : rebuild the SFT checkpoint the trainer starts from (checkpoints/addition_sft, ~20 s, deterministic on one machine)
# make bench : token_logprobs vs public implementations, the CLI run, notebook times, slider redraws in the browser, the grader (bench/README.md)
# make mock  : a mock round, practice/round_N.py [ROUND=N] [BUGS=3|k|all] [HARD=1]; then make grade, make hint
# make scratch : practice/scratch_N.py, the spec's functions as stubs to write [FUNCS=a,b|all]; then make grade FILE=
# make drill  : the discussion drill in the terminal [TOPIC=...] [WEAKEST=1] [ID=a,b] [SEED=n] [SCORES=path]; make drill REPORT=1 shows your scores per topic, EXPORT=cards.md writes the bank as Markdown
# make interview : a 3-bug round with a 45-minute countdown; run it again for 15 minutes of questions and a write-up
# make progress  : what the practice log says: time to each fix, hints, wrong attempts, drill scores over days

PY := .venv/bin/python
STAMP := .venv/.installed
NBVAL := --nbval --nbval-current-env --nbval-sanitize-with notebooks/nbval_sanitize.cfg --nbval-cell-timeout=300

.PHONY: venv lab test test-fast test-browser notebooks bench sft clean mock grade hint scratch drill progress interview

# The environment: the pinned requirements, then the project's Jupyter defaults, installed as the environment's
# own (a changed file re-runs this recipe): jupyter/overrides.json, JupyterLab's settings (never fetch Jupyter
# news, so a first start asks nothing about it, and no update check), and jupyter/jupyter_lab_config.json
# (the Lab opens notebooks/00_practice.ipynb).
LAB_OVERRIDES := .venv/share/jupyter/lab/settings/overrides.json
LAB_CONFIG := .venv/etc/jupyter/jupyter_lab_config.json

$(STAMP): requirements.txt pyproject.toml jupyter/overrides.json jupyter/jupyter_lab_config.json
	test -x $(PY) || python3 -m venv .venv
	$(PY) -m pip install --quiet --disable-pip-version-check -r requirements.txt
	mkdir -p $(dir $(LAB_OVERRIDES)) $(dir $(LAB_CONFIG))
	cp jupyter/overrides.json $(LAB_OVERRIDES)
	cp jupyter/jupyter_lab_config.json $(LAB_CONFIG)
	touch $(STAMP)

venv: $(STAMP)

# Rooted at the repository (the file browser shows the twins, SPEC.md and practice/); JupyterLab refuses to run
# as root unless told, and containers often are root.
lab: venv
	$(PY) -m jupyter lab --ServerApp.root_dir=. $$([ "$$(id -u)" = 0 ] && echo --allow-root)

# The browser test and nbval each execute every notebook in one kernel: on two cores they run side by side
# (the browser test's report is printed after nbval's), and the target fails if either fails. nbval's kernels
# start with the figure check (tests/figure_check.py: an IPython startup file in a temporary IPYTHONDIR), so
# an illegible figure fails its cell.
test: venv
	$(PY) -m ruff check .
	$(PY) -m pytest -n 2 tests -m "not browser"
	@log=$$(mktemp); $(PY) -m pytest -p no:xdist tests/browser > $$log 2>&1 & browser=$$!; \
	echo "$(PY) -m pytest $(NBVAL) notebooks   (the browser test runs beside it)"; \
	ipy=$$(mktemp -d); $(PY) tests/figure_check.py --startup $$ipy; \
	IPYTHONDIR=$$ipy $(PY) -m pytest $(NBVAL) notebooks; nbval=$$?; rm -rf $$ipy; \
	wait $$browser; browser=$$?; echo "== the browser test (tests/browser):"; cat $$log; rm -f $$log; \
	test $$nbval = 0 && test $$browser = 0

test-fast: venv
	$(PY) -m pytest -n 2 tests -m "not slow and not browser"

# JupyterLab in Debian's Chromium (apt-get install chromium): run all cells, move a slider, time the redraw.
test-browser: venv
	$(PY) -m pytest -p no:xdist -s tests/browser

# Re-execute every notebook in place (do this after any change to the twins), then commit.
# The per-cell timeout bounds nbclient's known intermittent stall on widget cells (jupyter/nbclient#312):
# a stalled cell resumes after it with its outputs intact.
notebooks: venv
	$(PY) -m jupyter nbconvert --to notebook --execute --inplace --ExecutePreprocessor.timeout=60 notebooks/*.ipynb

# Practice (the interview package; `$(PY) -m interview --help`): grade and hint default to the newest round.
# The grader's own exit code (0 all fixed, 1 not yet, 2 cannot grade) is that of `$(PY) -m interview grade FILE`.
# make grade names only the bugs already fixed and counts broken edits; REVEAL=1 names the remaining bugs and
# the functions an edit broke (make hint gives one remaining bug's hint, N=k the k-th, ALL=1 all of them).
mock: venv
	@$(PY) -m interview mock $(if $(ROUND),--round $(ROUND)) $(if $(BUGS),--bugs $(BUGS)) \
		$(if $(filter-out 0,$(HARD)),--hard)

grade: venv
	@$(PY) -m interview grade $(FILE) $(if $(filter-out 0,$(REVEAL)),--reveal)

hint: venv
	@$(PY) -m interview hint $(FILE) $(if $(LEVEL),--level $(LEVEL)) $(if $(N),--which $(N)) \
		$(if $(filter-out 0,$(ALL)),--all)

# From scratch (interview/scratch.py): `make grade FILE=practice/scratch_N.py` grades it sentence by sentence
# of the spec (SPEC.md).
scratch: venv
	@$(PY) -m interview scratch $(if $(FUNCS),--funcs "$(FUNCS)")

# The discussion drill (interview/drill.py, bank in interview/questions.toml; answers in practice/history.jsonl).
drill: venv
	@$(PY) -m interview drill $(if $(filter-out 0,$(REPORT)),--report) $(if $(TOPIC),--topic "$(TOPIC)") \
		$(if $(filter-out 0,$(WEAKEST)),--weakest) $(if $(ID),--id "$(ID)") $(if $(SEED),--seed $(SEED)) \
		$(if $(SCORES),--scores "$(SCORES)") $(if $(EXPORT),--export "$(EXPORT)")

# The practice log (interview/history.py) and the interview mode (interview/interview_mode.py).
progress: venv
	@$(PY) -m interview progress

interview: venv
	@$(PY) -m interview interview $(if $(filter-out 0,$(HARD)),--hard)

bench: venv
	$(PY) bench/run.py

sft: venv
	$(PY) sft.py

clean:
	rm -rf .venv .pytest_cache .ruff_cache .hypothesis
