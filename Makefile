# `make demo` and `make test` work from a fresh clone: they create .venv and install into it first.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip
# The torch the environment gets. On this project's CPU machines `torch==2.13.0` resolves to a local
# CPU wheel; elsewhere pip picks the build for the platform (CUDA on Linux). Override freely:
#   make install TORCH='torch==2.5.1'
TORCH  ?= torch==2.13.0
DEMO_OUT ?= demo-run
# `make multi30k MIRROR=../shared/data/multi30k`: the Multi30k recipe from a local copy of the data.
MIRROR ?=
# `make multi30k-mono ... MONO_MIRROR=FOLDER`: a local copy of Multi30k task 2's captions (nmt download multi30k-mono).
MONO_MIRROR ?=
MULTI30K_OUT ?= multi30k-run
# `make gpu-check GPU_REPORT=FILE`: where the GPU check writes its report.
GPU_REPORT ?= gpu-check-report.md

.PHONY: install demo test test-long lint multi30k multi30k-student multi30k-mono gpu-check clean

install: $(VENV)/.installed

$(VENV)/.installed: setup.cfg pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip setuptools wheel
	$(PY) -c "import torch" 2>/dev/null || $(PIP) install -q "$(TORCH)"
	# youtokentome ships no wheel for recent Pythons; its build imports Cython, hence no build isolation.
	$(PIP) install -q Cython
	$(PY) -c "import youtokentome" 2>/dev/null || $(PIP) install -q --no-build-isolation youtokentome
	# The distribution is nmt-toolkit (`nmt` on the package index is another project); an environment
	# made when it was called nmt drops that install first, so that one distribution owns `nmt`.
	$(PIP) uninstall -q -y nmt 2>/dev/null || true
	$(PIP) install -q -e ".[test,serve]"
	touch $@

demo: install
	$(VENV)/bin/nmt demo --out $(DEMO_OUT)

test: install
	$(PY) -m pytest -q

# Lint and type checks (configured in pyproject.toml); CI runs them after the tests.
lint: install
	$(PY) -m ruff check nmt tests benchmarks tools
	$(PY) -m mypy

# The longest end-to-end tests (fine-tuning, the gpu-check smoke run), which `make test` leaves out; CI runs both.
test-long: install
	$(PY) -m pytest -q -m long

# Both directions of Multi30k (en-de, de-en), one core each, about 88 minutes: docs/results-multi30k.md
multi30k: install
	NMT=$(VENV)/bin/nmt MIRROR=$(MIRROR) recipes/multi30k.sh $(MULTI30K_OUT)

# Distilled students of those two models (make multi30k first, skipped where done): a 6+2-layer student per
# direction, 45 minutes on one core each, scored with CTranslate2 int8: docs/results-multi30k.md
multi30k-student: multi30k
	NMT=$(VENV)/bin/nmt recipes/multi30k-student.sh $(MULTI30K_OUT)

# Monolingual captions (Multi30k task 2) on top of `make multi30k` (skipped where done): back-translation, the
# teachers again on real + synthetic pairs (and a second seed), forward translation, students; steps skip what is
# done, so it can run in several sittings: docs/results-multi30k.md
multi30k-mono: install
	NMT=$(VENV)/bin/nmt MIRROR=$(MIRROR) MONO_MIRROR=$(MONO_MIRROR) recipes/multi30k-mono.sh $(MULTI30K_OUT)

# On a machine with a CUDA GPU: training in fp32/bf16/fp16, torchrun, translation against the CPU and
# throughput, end to end in at most 10 minutes; PASS/FAIL per check in $(GPU_REPORT); exit 1 if one
# failed (2: no CUDA GPU). Without a GPU: $(PY) benchmarks/gpu_check.py --cpu (the smoke test).
gpu-check: install
	$(PY) benchmarks/gpu_check.py --report $(GPU_REPORT)

clean:
	rm -rf $(VENV) $(DEMO_OUT) $(MULTI30K_OUT) build *.egg-info
