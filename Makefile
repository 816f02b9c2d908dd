# Sotto: `make up` runs the product, `make test` passes the tests. Both install what they need first.
SHELL := /bin/bash
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
export SOTTO_MODEL_DIR ?= $(HOME)/.cache/sotto/models
EXTRAS := vad,llm,tts,gateway,test

.PHONY: install system-deps proto up down status logs test test-fast bench models-offline clean

$(VENV)/.installed: pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e ".[$(EXTRAS)]"
	touch $@

install: $(VENV)/.installed

# espeak-ng and sox make the speech fixtures the tests speak.
system-deps:
	@command -v espeak-ng >/dev/null && command -v sox >/dev/null || \
	  (apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q espeak-ng sox)

proto: install
	$(PY) -m grpc_tools.protoc -Iprotos --python_out=. --grpc_python_out=. --pyi_out=. protos/sotto/v1/*.proto

up: install
	$(PY) -m tools.runner up

down:
	$(PY) -m tools.runner down

status:
	$(PY) -m tools.runner status

logs:
	$(PY) -m tools.runner logs --follow

test: install system-deps
	$(PY) -m pytest

clean:
	rm -rf $(VENV) run
