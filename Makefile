# kioku — two commands matter: `make demo` and `make test`. Both install what they need.
CARGO ?= cargo
export CARGO_TERM_COLOR ?= never

.PHONY: all build demo test deps lint unit java soak bench clean

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

# The Java agent (java/): unit tests, then the packaged agent's crash and power-cut tests.
# The Rust CLI is built first: the Java pool tests check that it reads Java-written pools.
java: deps
	$(CARGO) build --release -p kioku-cli
	cd java && mvn -B -q -ntp verify

# Every test: formatting and lints, then all unit, property, crash and CLI tests, then Java's.
test: lint unit java

# Kill-and-restore soak (not part of `make test`): the real programs of
# crates/cli/tests/proc_programs.rs (sqlite3, a JVM, sh, make -j2, Python, node.js, an event
# loop, a TCP server, a process tree) and the examples of proc_restore.rs, SIGKILLed and restored
# SOAK_KILLS times each; every reference run three times over to show it is deterministic.
# A failure prints KIOKU_SEED, which replays its kill moments.
SOAK_KILLS ?= 50
soak: deps
	KIOKU_PROC_KILLS=$(SOAK_KILLS) KIOKU_PROC_REFERENCES=3 \
	  $(CARGO) test -p kioku-cli --test proc_programs --test proc_restore -- --nocapture

# Benchmarks (not part of `make test`); each writes its section of docs/perf.md.
bench:
	@scripts/deps.sh bench
	bench/run-all.sh

clean:
	$(CARGO) clean
	cd java && mvn -q clean
	rm -rf .kioku
