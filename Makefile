# Two commands for a newcomer: `make run` and `make test`.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
CHATAPP := $(VENV)/bin/chatapp
STAMP := $(VENV)/.installed
# ggml's AMX kernels segfault on CPUs that report AMX under some hypervisors, and -march=native turns
# them on: build without them on x86-64 (chatapp.llama_tools builds llama.cpp's programs the same way).
NO_AMX := -mno-amx-tile -mno-amx-int8 -mno-amx-bf16
ifeq ($(shell uname -m),x86_64)
export CMAKE_ARGS ?= -DCMAKE_C_FLAGS='$(NO_AMX)' -DCMAKE_CXX_FLAGS='$(NO_AMX)'
endif

.PHONY: install model run test bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	@echo "Installing chatapp; the first install compiles llama.cpp (about 5 minutes on 2 cores)."
	$(PY) -m pip install --progress-bar off -e '.[test]'
	touch $(STAMP)

install: $(STAMP)

model: $(STAMP)
	$(CHATAPP) models pull --if-missing

run: model
	$(CHATAPP)

test: model
	$(PY) -m pytest

bench: model
	$(PY) benchmarks/engine_speed.py
	$(PY) benchmarks/tui_vs_llama_cli.py
	$(PY) benchmarks/stop_and_quit.py
	$(PY) benchmarks/session_resume.py
	$(PY) benchmarks/remote_speed.py

clean:
	rm -rf $(VENV) .pytest_cache build *.egg-info
