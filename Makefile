# Two commands on a fresh machine: `make demo` and `make test`.
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip
STAMP  := $(VENV)/.installed

.PHONY: setup demo test test-slow verify bench clean

setup: $(STAMP)

$(STAMP): pyproject.toml constraints.txt
	python3 -m venv $(VENV)
	$(PIP) install -q -c constraints.txt torch==2.13.0
	$(PIP) install -q -c constraints.txt -e '.[dev]'
	# optional external oracle: FLA's pure-torch naive references (never triton on CPU)
	$(PIP) install -q --no-deps fla-core==0.6.0
	touch $(STAMP)

demo: setup
	$(VENV)/bin/assocmem demo

test: setup
	$(PY) -m pytest -q -m "not slow" -p no:cacheprovider

test-slow: setup
	$(PY) -m pytest -q -m slow -p no:cacheprovider

verify: setup
	$(VENV)/bin/assocmem verify

bench: setup
	$(VENV)/bin/assocmem bench mixers --json bench_mixers.json

clean:
	rm -rf $(VENV) build *.egg-info
