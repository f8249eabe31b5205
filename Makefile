# kioku — two commands matter: `make demo` and `make test`. Both install what they need.
CARGO ?= cargo
export CARGO_TERM_COLOR ?= never

.PHONY: all build demo test deps lint unit bench clean

all: build

deps:
	@scripts/deps.sh test

build: deps
	$(CARGO) build --release --workspace

# The most complete end-to-end scenario that exists: a pool surviving SIGKILL
# (write, SIGKILL, reopen, verify), under ./.kioku/.
demo: deps
	$(CARGO) run --release -q -p kioku-pool --example crash_demo -- --pool .kioku/demo.pool

lint: deps
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings

unit: deps
	$(CARGO) test --workspace

# Every test: formatting and lints, then all unit, property, crash and CLI tests.
test: lint unit

# Benchmarks (not part of `make test`); each writes its section of docs/perf.md.
bench:
	@scripts/deps.sh bench
	bench/run-all.sh

clean:
	$(CARGO) clean
	rm -rf .kioku
