# Two commands on a fresh machine: `make demo` and `make test`.
#
# `make setup` installs the locked environment: constraints.txt pins every package (torch
# included) to the version the suite last passed with, so a release upstream cannot break a fresh
# clone. pyproject.toml keeps ranges for library users. `make lock` regenerates the lock from the
# newest versions the ranges allow; `make test-latest` / `make test-oldest` run the default suite
# in throw-away venvs at the top / bottom of the ranges, to see drift before users do.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip
STAMP  := $(VENV)/.installed
LOCK   := constraints.txt
# The CPU build of torch that lies on the development machines' disk; a looser pin pulls a
# multi-GB CUDA build. Override for the drift targets, e.g. `make test-latest TORCH=torch`.
TORCH  ?= torch==2.13.0
# FLA's pure-torch naive references, an optional test oracle; --no-deps keeps triton out.
FLA    := fla-core
PYTEST := -m pytest -q -m "not slow" -p no:cacheprovider

.PHONY: setup setup-eval demo test test-slow test-latest test-oldest lock verify bench bench-gpu gpu-wheels gpu-check clean

setup: $(STAMP)

$(STAMP): pyproject.toml $(LOCK)
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q -c $(LOCK) torch
	$(PIP) install -q -c $(LOCK) -e '.[dev]'
	$(PIP) install -q -c $(LOCK) --no-deps $(FLA)
	touch $(STAMP)

# The optional [eval] extra (lm-evaluation-harness with its hf backend, ~45 more packages), locked
# like the rest; without it tests/probes/test_lm_eval.py skips with the reason.
setup-eval: setup
	$(PIP) install -q -c $(LOCK) -e '.[dev,eval]'

demo: setup
	$(VENV)/bin/assocmem demo

test: setup
	$(PY) $(PYTEST)

test-slow: setup
	$(PY) -m pytest -q -m slow -p no:cacheprovider

# Newest versions the ranges allow (no lock), in .venv-latest; prints the versions it tested.
test-latest:
	rm -rf .venv-latest
	$(PYTHON) -m venv .venv-latest
	.venv-latest/bin/pip install -q '$(TORCH)'
	.venv-latest/bin/pip install -q --upgrade -e '.[dev,eval]'
	.venv-latest/bin/pip install -q --upgrade --no-deps $(FLA)
	.venv-latest/bin/pip freeze --exclude-editable | grep -iE '^(torch|transformers|datasets|pydantic|fla-core)='
	.venv-latest/bin/python $(PYTEST)

# Lowest versions the ranges allow (pyproject's lower bounds pinned with ==), in .venv-oldest. The [test]
# extra, not [dev]: TRL needs datasets and pyyaml above the library's floors (pyproject.toml), so its tests skip.
test-oldest:
	rm -rf .venv-oldest
	$(PYTHON) -m venv .venv-oldest
	$(PYTHON) .ci/lower_bounds.py test > .venv-oldest/oldest.txt
	.venv-oldest/bin/pip install -q -c .venv-oldest/oldest.txt '$(TORCH)'
	.venv-oldest/bin/pip install -q -c .venv-oldest/oldest.txt -e '.[test]'
	.venv-oldest/bin/pip install -q --no-deps $(FLA)
	.venv-oldest/bin/pip freeze --exclude-editable | grep -iE '^(torch|transformers|datasets|pydantic|fla-core)='
	.venv-oldest/bin/python $(PYTEST)

# Regenerate the lock: the newest versions the ranges allow, frozen. Run `make test` after it.
lock:
	rm -rf .venv-lock
	$(PYTHON) -m venv .venv-lock
	.venv-lock/bin/pip install -q '$(TORCH)'
	.venv-lock/bin/pip install -q -e '.[dev,eval]'
	.venv-lock/bin/pip install -q --no-deps $(FLA)
	{ echo "# The locked environment of \`make setup\` (pip -c): every package at the version the suite"; \
	  echo "# passed with. Regenerate with \`make lock\`, then run \`make test\`. Library users get the"; \
	  echo "# ranges of pyproject.toml. torch is the CPU build on the development machines' disk."; \
	  .venv-lock/bin/pip freeze --exclude-editable | sed -e 's/+cpu$$//'; } > $(LOCK)
	rm -rf .venv-lock

verify: setup
	$(VENV)/bin/assocmem verify

bench: setup
	$(VENV)/bin/assocmem bench mixers --json bench_mixers.json

# On a CUDA machine with a CUDA torch and assocmem[cuda] (docs/gpu.md): every kernel backend of each family
# against FLA's kernel called directly and SDPA, B=8, H=16, K=V=128, T 2048 and 8192, bf16 (under 5 minutes)
bench-gpu: setup
	$(VENV)/bin/assocmem bench backends --device cuda --json bench_gpu.json --markdown bench_gpu.md

# The wheels .ci/gpu_check.sh installs on a GPU machine without a package index, into .whl/ (git-ignored)
gpu-wheels:
	bash .ci/gpu_wheels.sh $(PYTHON)

# smoke, verify and the GPU benches with a time limit each, results in $(OUT) (docs/gpu.md); DEVICE=cpu: tiny
gpu-check:
	DEVICE=$(or $(DEVICE),cuda) OUT=$(or $(OUT),gpu_check_out) bash .ci/gpu_check.sh

clean:
	rm -rf $(VENV) .venv-latest .venv-oldest .venv-lock build *.egg-info
