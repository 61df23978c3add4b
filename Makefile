# Two commands do all set-up on a fresh Debian machine with Python 3.11:
#   make run   - create .venv, install mqgate and what the README's examples use, serve on the default ports
#   make test  - install everything the suite needs, run the whole suite
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip
ARGS   ?=

.PHONY: run test test-pure build bench faults install install-dev system-deps test-deps node-deps clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip

# The kernels are compiled once, by `build` (in place, both cores, kept for
# incremental rebuilds), not a second time in pip's temporary build tree.
# The 4.x C++ client (`rocketmq`) and the 5.x gRPC client (`rocketmq-python-client`)
# both ship rocketmq/__init__.py: the 5.x one must win (its modules import from it;
# the C++ client's is empty and `rocketmq.client` works under either), whatever
# order pip installed them in.
RMQ5_FIRST := $(PIP) install --quiet --force-reinstall --no-deps rocketmq-python-client==5.1.2

$(VENV)/.installed: $(PY) pyproject.toml setup.py
	MQGATE_PURE_PYTHON=1 $(PIP) install --quiet -e '.[dev,spark]'
	$(RMQ5_FIRST)
	touch $@

$(VENV)/.installed-dev: $(VENV)/.installed pyproject.toml
	MQGATE_PURE_PYTHON=1 $(PIP) install --quiet -e '.[dev,spark]'
	$(RMQ5_FIRST)
	touch $@

install: $(VENV)/.installed

install-dev: $(VENV)/.installed-dev test-deps node-deps

# Debian packages, installed only when one is missing. What the examples use
# (make run): mosquitto (a broker to compare against), mosquitto-clients
# (mosquitto_pub / mosquitto_sub), Java (Spark), etcd-server (automatic
# failover). What the suite and `make bench` add (test-deps): rabbitmq-server
# (its MQTT plugin is a compared broker), valgrind (callgrind counts
# instructions per message: loadtest.bench_instructions), and chromium with
# chromium-driver (the dashboard's browser test drives a headless Chromium).
system-deps:
	@if ! command -v mosquitto_pub >/dev/null || ! command -v mosquitto >/dev/null \
	     || ! command -v java >/dev/null || ! command -v etcd >/dev/null; then \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && \
	  $$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
	      mosquitto mosquitto-clients default-jre-headless etcd-server >/dev/null; \
	fi

test-deps: system-deps
	@if [ ! -x /usr/lib/rabbitmq/bin/rabbitmq-server ] || ! command -v valgrind >/dev/null \
	     || ! command -v chromium >/dev/null || ! command -v chromedriver >/dev/null; then \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && \
	  $$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq rabbitmq-server valgrind \
	      chromium chromium-driver >/dev/null; \
	fi

# The Node `ali-ons` RocketMQ client (4.x remoting), the 5.x gRPC client
# `rocketmq-client-nodejs`, real peers of the interop tests, and MQTT.js, the
# MQTT 5 enhanced authentication (SCRAM) peer (tests/gateway/test_scram_mqttjs.py).
ALI_ONS := .deps/ali-ons/node_modules/ali-ons/package.json
RMQ5_NODE := .deps/rocketmq-client-nodejs/node_modules/rocketmq-client-nodejs/package.json
MQTTJS := .deps/mqttjs/node_modules/mqtt/package.json
node-deps: $(ALI_ONS) $(RMQ5_NODE) $(MQTTJS)

NPM_CHECK = @command -v npm >/dev/null || { SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && $$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm >/dev/null; }

$(RMQ5_NODE): $(ALI_ONS)
	npm install --prefix .deps/rocketmq-client-nodejs rocketmq-client-nodejs@1.0.8 --no-audit --no-fund --loglevel=error

$(ALI_ONS):
	$(NPM_CHECK)
	npm install --prefix .deps/ali-ons ali-ons@3.12.0 --no-audit --no-fund --loglevel=error

$(MQTTJS):
	$(NPM_CHECK)
	npm install --prefix .deps/mqttjs mqtt@5.16.0 --no-audit --no-fund --loglevel=error

# The compiled kernels (setup.py), rebuilt in place when a source changed
# since `pip install -e` (a stale compiled copy is never used: core/_kernels.py).
build: $(VENV)/.installed
	$(PY) setup.py -q build_ext --inplace -j 2

run: install build system-deps
	$(VENV)/bin/mqgate serve $(ARGS)

# The whole suite with the compiled kernels, then the kernels' own suites
# (codec, store, topic matching) as pure Python.
# The suite runs on TEST_WORKERS pytest-xdist workers, a test file to a
# worker; the tests marked serial (Spark, the documentation examples: they
# load both cores themselves) run after, alone. Exit status 5 is "no test
# selected", which an ARGS narrowing to one part gives the other.
TEST_WORKERS ?= 2
test: install-dev build
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadfile -m "not serial" --durations=20 $(ARGS) || [ $$? -eq 5 ]
	$(PY) -m pytest -m serial --durations=10 $(ARGS) || [ $$? -eq 5 ]
	$(MAKE) --no-print-directory test-pure

PURE_SUITES := tests/gateway/mqtt tests/gateway/wildcard tests/core/store tests/kernels tests/core/broker/test_send_many.py tests/core/broker/test_send_batch_hooks.py tests/core/broker/test_stored_hook_topics.py
test-pure: install-dev
	MQGATE_PURE_PYTHON=1 $(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile $(PURE_SUITES)

bench: install-dev
	$(PY) -m loadtest bench $(ARGS)

# The fault campaign (issue 17, docs/RELIABILITY.md): kill rounds under mixed
# load, fuzzing, hostile clients and a soak; writes faults-report/report.json
# and faults-report/index.html; exit 1 when a verdict fails. ARGS narrows it,
# e.g. ARGS="--rounds 5 --fuzz-frames 200000 --soak-minutes 5".
faults: install-dev build
	$(PY) tests/faults/campaign.py --out faults-report $(ARGS)

clean:
	rm -rf $(VENV) .deps build *.egg-info .pytest_cache
	find core gateway -name '*.so' -delete
