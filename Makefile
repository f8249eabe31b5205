# kioku — two commands matter: `make demo` and `make test`. Both install what they need.
CARGO ?= cargo
export CARGO_TERM_COLOR ?= never

.PHONY: all build demo test deps lint unit bench clean

all: build

deps:
	@scripts/deps.sh test

build: deps
	$(CARGO) build --release --workspace

# kioku's main job: an unmodified program (the pi spigot) checkpointed every 10 ms under
# `kioku run`, SIGKILLed part-way, brought back by `kioku restore`, its output checked against
# an uninterrupted run. Pool under ./.kioku/.
demo: deps
	scripts/demo.sh

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
