# Two entry points on a fresh machine: `make train` and `make test`. Both build the
# virtual environment first (once; again when pyproject.toml changes).
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

BUNDLE ?= artifacts/router
TIER   ?= static
ENGINE ?= local
CONFIG ?=
SIGNING_KEY ?=
KEYS   ?= keys
ARGS   ?=
PORT   ?= 5000
MLRUNS ?= mlruns
N      ?= 100000
OUT    ?= data/simulated
ROWS   ?= 1e4,1e5,1e6
CLIENTS ?= 16
REQUESTS ?= 2000

# Training, evaluation and the UI share one MLflow store: $(MLRUNS), unless MLFLOW_TRACKING_URI is set.
export MLFLOW_TRACKING_URI ?= sqlite:///$(MLRUNS)/mlflow.db

# Nothing may load from a model or dataset hub at run time.
export HF_HUB_OFFLINE := 1
export HF_DATASETS_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1

.PHONY: venv system-packages train evaluate results keys test lint ui data bench loadtest label promote compare compare-configs replay simulate scale clean

venv: $(STAMP)

# constraints.txt pins every version, so a fresh clone installs what its figures were measured with.
$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	# torch first, from the local CPU wheel: otherwise sentence-transformers pulls a CUDA build.
	$(BIN)/pip install --quiet torch==2.13.0
	$(BIN)/pip install --quiet -c constraints.txt -e '.[train,test,client,server,lint,telemetry,languages,redis]'
	touch $@

# The Debian packages the suites drive (commands of the same name): installed when missing, as root or
# through passwordless sudo; otherwise `make test` stops before the suite with one line naming them.
system-packages:
	@scripts/install_system_packages.sh chromium redis-server

train: $(STAMP)
	$(BIN)/python -m pipelines.train --bundle $(BUNDLE) --tier $(TIER) --engine $(ENGINE) $(if $(CONFIG),--config $(CONFIG)) $(if $(SIGNING_KEY),--set bundle.signing_key=$(SIGNING_KEY)) $(ARGS)

# An Ed25519 key pair for signing bundles: $(KEYS)/router.key (keep it private), $(KEYS)/router.pub.
keys: $(STAMP)
	$(BIN)/python -m pipelines.keys --out $(KEYS)

# CV=K: cross-validate the training configuration instead (every stage refit in each of K
# prompt-hash folds; figures with 95% intervals; REPEATS=R cuts the folds again with other salts).
CV      ?=
REPEATS ?= 1
evaluate: $(STAMP)
ifeq ($(CV),)
	$(BIN)/python -m pipelines.evaluate --bundle $(BUNDLE) --engine $(ENGINE) --leave-one-source-out $(if $(POLICY),--policy $(POLICY) )$(ARGS)
else
	$(BIN)/python -m pipelines.crossval --folds $(CV) --repeats $(REPEATS) --engine $(ENGINE) $(if $(CONFIG),--config $(CONFIG)) $(ARGS)
endif

# Paired comparison of two training configurations on the same folds: B - A with 95% intervals.
A ?=
B ?=
compare-configs: $(STAMP)
	$(BIN)/python -m pipelines.crossval --compare $(A) --compare $(B) --folds $(or $(CV),5) --repeats $(REPEATS) --engine $(ENGINE) $(ARGS)

# The README's headline table: train, then write the bundle's test-split figures into README.md.
results: train
	$(BIN)/python -m pipelines.results --bundle $(BUNDLE) --write README.md

# The suite on every core (WORKERS=0: in one process, no workers); tests/conftest.py keeps the whole-log trainings on one worker.
# Bytecode is cached (__pycache__, as Python does by default) even where the environment sets
# PYTHONDONTWRITEBYTECODE: otherwise each worker rewrites every test module's asserts again
# (collection 11 s -> 5 s) and each of the suite's Python processes compiles what it imports.
WORKERS ?= auto
test: $(STAMP) system-packages
	PYTHONDONTWRITEBYTECODE= $(BIN)/python -m pytest -n $(WORKERS) --dist loadgroup $(ARGS)

# Formatting, lint (ruff: pycodestyle, pyflakes, imports, bugbear) and strict types on the SDK (mypy); .ci/run runs it.
lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

ui: $(STAMP)
	$(BIN)/mlflow ui --backend-store-uri $(MLFLOW_TRACKING_URI) --default-artifact-root $(MLRUNS)/artifacts --host 127.0.0.1 --port $(PORT)

# The SDK's speed (pipelines/bench.py); AGAINST=<commit>: route() p50 of this SDK and the one at <commit>, from git,
# interleaved in rounds in one run, without and with a 20-rule policy (bench/versions.json).
bench: $(STAMP)
	$(BIN)/python -m pipelines.bench --bundle $(BUNDLE) $(if $(AGAINST),--against $(AGAINST)) $(ARGS)

# The routing proxy under load on loopback: added latency over calling the stub directly; writes bench/proxy_load.json.
loadtest: $(STAMP)
	$(BIN)/python -m pipelines.proxy_load --bundle $(BUNDLE) --clients $(CLIENTS) --requests $(REQUESTS) $(ARGS)

data: $(STAMP)
	$(BIN)/python -m pipelines.fetch_data --dest data/raw/routellm

# Grade the answers in an SDK outcome log with an LLM judge behind an OpenAI-compatible endpoint.
LOGS       ?= logs
JUDGE_URL  ?=
JUDGE_MODEL ?=
label: $(STAMP)
	$(BIN)/python -m pipelines.label --logs $(LOGS) --base-url $(JUDGE_URL) --model $(JUDGE_MODEL) $(ARGS)

# Move the MLflow alias `champion` to BUNDLE if it is at least as good on the same logs: ARGS="--logs logs/ [--full-logs dir] [--dry-run]".
promote: $(STAMP)
	$(BIN)/python -m pipelines.promote --bundle $(BUNDLE) $(ARGS)

# Is the traffic in the outcome log LOGS still like BUNDLE's training traffic? stable / watch / retrain
# (docs/observability.md#drift); writes reports/drift/drift.json. ARGS="--fail-on retrain" exits 1 on that verdict.
.PHONY: drift
drift: $(STAMP)
	$(BIN)/python -m pipelines.drift --bundle $(BUNDLE) --logs $(LOGS) $(ARGS)

# The traffic dashboard of the outcome log LOGS as one static HTML file (docs/observability.md#dashboard-and-report):
# ARGS="--period day|week", "--since 2026-11-23 --until 2026-11-30", "--out reports/traffic.html" (the default).
.PHONY: report
report: $(STAMP)
	$(BIN)/python -m pipelines.traffic_report --logs $(LOGS) $(ARGS)

# How many decisions change when bundle NEW replaces OLD, on a fixed sample of LOGS' prompts.
NEW ?= $(BUNDLE)
compare: $(STAMP)
	$(BIN)/python -m pipelines.compare --old $(OLD) --new $(NEW) --logs '$(LOGS)' $(ARGS)

# The training logs replayed as one-outcome traffic through the SDK: what retraining recovers (bench/replay.json).
replay: $(STAMP)
	$(BIN)/python -m pipelines.replay --out $(if $(filter command line,$(origin OUT)),$(OUT),reports/replay) $(ARGS)

# MT-Bench's second turns routed with and without the first turn's outcome, paired (docs/evaluation.md#conversations-what-the-first-turn-tells-about-the-second).
.PHONY: turns
turns: $(STAMP)
	$(BIN)/python -m pipelines.mt_bench_turns --out reports/mt_bench_turns.json $(ARGS)

# The previous turn as evidence (pipelines/turn_evidence.py, docs/conversations.md): on simulated conversations, log loss of every endpoint's
# P(good answer) from the text alone and with the last turn weighed, paired over folds (reports/turn_evidence.json);
# ARGS="--bundle B --logs L --out-bundle O [--signing-key K]" fits B's weights from linked logs and writes B again at O.
.PHONY: turn-evidence
turn-evidence: $(STAMP)
	$(BIN)/python -m pipelines.turn_evidence --out reports/turn_evidence.json $(ARGS)

# Conversations, offline (pipelines/conversations.py, docs/evaluation.md#conversations-make-conversations): simulated
# conversations (or ARGS="--data logs/"), a bundle per conversation-hash fold, the held-out conversations replayed through
# the SDK under each stickiness; writes reports/conversations/metrics.json.
.PHONY: conversations
conversations: $(STAMP)
	$(BIN)/python -m pipelines.conversations $(ARGS)

# Synthetic logs (labelled synthetic; never used for headline figures).
simulate: $(STAMP)
	$(BIN)/python -m pipelines.simulate --n $(N) --out $(OUT) $(ARGS)

# N endpoints, offline (pipelines/endpoints.py, docs/endpoints.md): simulated N-endpoint logs (or ARGS="--data logs/"), one
# outcome model per endpoint in each prompt-hash fold, the choosers on the held-out folds; writes reports/endpoints/.
.PHONY: endpoints
endpoints: $(STAMP)
	$(BIN)/python -m pipelines.endpoints $(ARGS)

# Wall time, rows/s and peak memory of both engines on simulated logs (README: Scale-out).
scale: $(STAMP)
	$(BIN)/python -m pipelines.scale --rows $(ROWS) $(ARGS)

# The content detectors (serving/policy): per-detector precision and recall with Wilson 95% intervals on the
# shipped labelled set (data/policy/pii_labelled.jsonl), and their speed; writes reports/pii/metrics.json
# (docs/policies.md#content-detectors). pii-set rewrites the labelled set from its seed.
.PHONY: pii-set pii-eval
pii-set: $(STAMP)
	$(BIN)/python -m pipelines.pii_set $(ARGS)

pii-eval: $(STAMP)
	$(BIN)/python -m pipelines.pii_eval $(ARGS)

# The request-language detector (serving/features/_language.py) on the shipped labelled prompts (data/languages/labelled.jsonl):
# per-language precision and recall at its confidence floor, the confusion counts, its cost per call
# (docs/endpoints.md#capabilities-in-n-endpoint-routing). ARGS="--floor 0.4 --out report.json".
.PHONY: language-eval
language-eval: $(STAMP)
	$(BIN)/python -m pipelines.language_eval $(ARGS)

# The Python SDK's decisions on the logs' test prompts and generated hard cases (pipelines/vectors.py), which other runtimes are held to.
JS_BUNDLE  ?= artifacts/js/bundle
JS_VECTORS ?= artifacts/js/vectors.json
.PHONY: vectors test-js bench-js
vectors: $(STAMP)
	$(BIN)/python -m pipelines.vectors --bundle $(BUNDLE) --out $(if $(filter command line,$(origin OUT)),$(OUT),$(JS_VECTORS))

# The JS SDK's bundle: trained when it is missing (not retrained when it is older than anything).
# Its training report goes beside it, so reports/train/run.json stays `make train`'s (tests/conftest.py reuses it).
$(JS_BUNDLE)/manifest.json: | $(STAMP)
	$(BIN)/python -m pipelines.train --bundle $(JS_BUNDLE) --set split.cv_folds=0 --set reports_dir=$(dir $(JS_BUNDLE))reports

# The JS SDK's N-endpoint bundle (docs/js.md#n-endpoint-bundles): `make endpoints`' command on 3,000 simulated
# four-endpoint rows, trained when it is missing; clients/js/scripts/endpoint_vectors.py writes the Python SDK's decisions on it.
JS_ENDPOINT_BUNDLE  ?= artifacts/js/endpoint-bundle
JS_ENDPOINT_VECTORS ?= artifacts/js/endpoint-vectors.json
# clients/js/scripts/policy_vectors.py: the Python SDK's policy layer on both bundles (clients/js/test/policy-parity.test.js)
JS_POLICY_VECTORS   ?= artifacts/js/policy-vectors.json
# clients/js/scripts/execute_vectors.py: the Python SDK's execute outcomes on scripted endpoints (clients/js/test/execute-parity.test.js)
JS_EXECUTE_VECTORS  ?= artifacts/js/execute-vectors.json
# clients/js/scripts/conversation_vectors.py: the Python SDK's conversation turns on both bundles (clients/js/test/conversation-parity.test.js)
JS_CONVERSATION_VECTORS ?= artifacts/js/conversation-vectors.json
$(JS_ENDPOINT_BUNDLE)/manifest.json: | $(STAMP)
	$(BIN)/python -m pipelines.endpoints --n 3000 --folds 3 --out artifacts/js/endpoint-report --bundle $(JS_ENDPOINT_BUNDLE)

# The JS SDK's tests (clients/js): trains JS_BUNDLE and JS_ENDPOINT_BUNDLE when they are missing, writes the vectors on
# them, installs clients/js from its lock file, runs npm test (Node) and npm run test:browser (headless Chromium:
# CHROMIUM, else /usr/bin/chromium, which system-packages installs when it is missing).
test-js: $(STAMP) system-packages $(JS_BUNDLE)/manifest.json $(JS_ENDPOINT_BUNDLE)/manifest.json
	$(BIN)/python -m pipelines.vectors --bundle $(JS_BUNDLE) --out $(JS_VECTORS)
	$(BIN)/python clients/js/scripts/endpoint_vectors.py --bundle $(JS_ENDPOINT_BUNDLE) --out $(JS_ENDPOINT_VECTORS)
	$(BIN)/python clients/js/scripts/policy_vectors.py --bundle $(JS_BUNDLE) --endpoint-bundle $(JS_ENDPOINT_BUNDLE) --out $(JS_POLICY_VECTORS)
	$(BIN)/python clients/js/scripts/execute_vectors.py --out $(JS_EXECUTE_VECTORS)
	$(BIN)/python clients/js/scripts/conversation_vectors.py --bundle $(JS_BUNDLE) --endpoint-bundle $(JS_ENDPOINT_BUNDLE) --out $(JS_CONVERSATION_VECTORS)
	cd clients/js && npm ci --ignore-scripts --no-audit --no-fund && ROUTER_BUNDLE=$(abspath $(JS_BUNDLE)) ROUTER_VECTORS=$(abspath $(JS_VECTORS)) \
		ROUTER_ENDPOINT_BUNDLE=$(abspath $(JS_ENDPOINT_BUNDLE)) ROUTER_ENDPOINT_VECTORS=$(abspath $(JS_ENDPOINT_VECTORS)) \
		ROUTER_POLICY_VECTORS=$(abspath $(JS_POLICY_VECTORS)) ROUTER_EXECUTE_VECTORS=$(abspath $(JS_EXECUTE_VECTORS)) \
		ROUTER_CONVERSATION_VECTORS=$(abspath $(JS_CONVERSATION_VECTORS)) npm test
	cd clients/js && ROUTER_BUNDLE=$(abspath $(JS_BUNDLE)) ROUTER_VECTORS=$(abspath $(JS_VECTORS)) \
		ROUTER_ENDPOINT_BUNDLE=$(abspath $(JS_ENDPOINT_BUNDLE)) ROUTER_ENDPOINT_VECTORS=$(abspath $(JS_ENDPOINT_VECTORS)) \
		ROUTER_POLICY_VECTORS=$(abspath $(JS_POLICY_VECTORS)) ROUTER_EXECUTE_VECTORS=$(abspath $(JS_EXECUTE_VECTORS)) \
		ROUTER_CONVERSATION_VECTORS=$(abspath $(JS_CONVERSATION_VECTORS)) npm run test:browser

# The JS SDK's speed (clients/js/scripts/bench.mjs), a benchmark: route() p50 / p90 in Node and in headless Chromium at
# pipelines/bench.py's ~16- and ~128-token prompts next to the Python SDK's on the same prompts in the same run, load
# times, the npm package's size; writes bench/js.json. ARGS="--repeat N --rounds R".
bench-js: $(STAMP) system-packages $(JS_BUNDLE)/manifest.json
	test -d clients/js/node_modules || (cd clients/js && npm ci --ignore-scripts --no-audit --no-fund)
	cd clients/js && node scripts/bench.mjs --bundle $(abspath $(JS_BUNDLE)) --python $(abspath $(BIN)/python) --out $(abspath bench/js.json) $(ARGS)

clean:
	rm -rf artifacts reports data/cache data/replay
