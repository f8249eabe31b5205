# kioku — two commands matter: `make demo` and `make test`. Both install what they need.
CARGO ?= cargo
# Every cargo of a recipe links with mold where it is installed (scripts/apt-packages.txt
# installs it): `make test` links about a hundred test binaries with debug line tables, and
# mold takes a tenth of a second where the default linker takes half a second each. Decided
# when the recipe runs (after `deps`), not when make reads this file; a RUSTFLAGS of the
# caller wins. A plain `cargo` outside make keeps the default linker.
CARGO_RUN = RUSTFLAGS="$${RUSTFLAGS-$$(command -v ld.mold >/dev/null 2>&1 && echo -C link-arg=-fuse-ld=mold)}" $(CARGO)
export CARGO_TERM_COLOR ?= never

.PHONY: all build demo test deps lint unit java soak soak-rust soak-java soak-hugepage soak-group soak-cache soak-dsm soak-capture fuzz fuzz-java bench clean

all: build

deps:
	@scripts/deps.sh test

build: deps
	$(CARGO_RUN) build --release --workspace

# kioku's main job: an unmodified program (the pi spigot) checkpointed every 10 ms under
# `kioku run`, SIGKILLed part-way, brought back by `kioku restore`, its output checked against
# an uninterrupted run. Pool under ./.kioku/.
demo: deps
	scripts/demo.sh

lint: deps
	$(CARGO_RUN) fmt --all -- --check
	$(CARGO_RUN) clippy --workspace --all-targets -- -D warnings

unit: deps
	$(CARGO_RUN) test --workspace

# The Java agent (java/): unit tests, then the packaged agent's crash and power-cut tests.
# The Rust CLI is built first, as `unit` builds it (so a no-op after `unit`): the Java pool tests
# check that it reads Java-written pools.
java: deps
	$(CARGO_RUN) test --workspace --no-run -q
	cd java && mvn -B -q -ntp verify

# Every test: formatting and lints, then all unit, property, crash and CLI tests, then Java's.
test: lint unit java

# Long runs (not part of `make test`; hours on 2 cores): `make soak` runs them all.
soak: soak-rust soak-java soak-hugepage soak-group soak-cache soak-dsm soak-capture

# Kill-and-restore soak: the real programs of crates/cli/tests/proc_programs.rs (sqlite3, a JVM,
# sh, make -j2, Python, node.js, an event loop, a TCP server, a process tree) and the examples of
# proc_restore.rs, SIGKILLed and restored SOAK_KILLS times each, every reference run three times
# over to show it is deterministic; power cuts of tree checkpoints with random crash images too.
# A failure prints KIOKU_SEED, which replays its kill moments. Then 20 s of seeded mutations
# of each fuzz corpus (make test: 1 s; `make fuzz` is the coverage-guided search).
# Power-cut tests enumerate every crash image of a cut point with up to 16 pending lines
# (make test: 10, and 1,024 of the images drawn for more; KIOKU_EXHAUSTIVE_LINES).
SOAK_KILLS ?= 50
soak-rust: deps
	KIOKU_PROC_KILLS=$(SOAK_KILLS) KIOKU_PROC_REFERENCES=3 \
	  $(CARGO_RUN) test -p kioku-cli --test proc_programs --test proc_restore -- --nocapture
	KIOKU_POWER_CUT_IMAGES=4 KIOKU_EXHAUSTIVE_LINES=16 \
	  $(CARGO_RUN) test -p kioku-run --test power_cut -- --nocapture
	KIOKU_EXHAUSTIVE_LINES=16 $(CARGO_RUN) test -p kioku-ckpt --test power_cut --test sparse \
	  -- --nocapture
	KIOKU_EXHAUSTIVE_LINES=16 $(CARGO_RUN) test -p kioku-pool --test commit_crash -- --nocapture
	KIOKU_FUZZ_SECS=20 $(CARGO_RUN) test -p kioku-fuzz --test corpus -- --nocapture

# Group checkpoints at length: the property test over 24 random sequences of levels, sizes
# and group shapes (KIOKU_SEED replays one), a rank killed at every step of a background
# encoding (make test: 3 of the 7), the 10-rank case, inline and background memory checks.
# The capture side of process checkpoints (crates/cli/tests/proc_capture.rs): memory rewritten
# whole every interval, killed (program or monitor) and restored SOAK_KILLS cycles.
soak-capture: deps
	KIOKU_PROC_KILLS=$(SOAK_KILLS) $(CARGO_RUN) test -p kioku-cli --test proc_capture -- --nocapture

soak-group: deps
	KIOKU_GROUP_SOAK=1 $(CARGO_RUN) test -p kioku-group --test mpi_jobs -- --nocapture

# The DSM's failure recovery at length: SOAK_DSM_RUNS jobs, each SIGKILLing a random node at a
# random fault-injection point (some a second node during the recovery), over shm and TCP; each
# result must equal the serial run. A failure prints the seed (KIOKU_DSM_SOAK_SEED replays it).
SOAK_DSM_RUNS ?= 200
soak-dsm: deps
	KIOKU_DSM_SOAK=$(SOAK_DSM_RUNS) $(CARGO_RUN) test -p kioku-dsm --test recovery soak -- --nocapture

# The Java tests at length: 30,000 SIGKILLs of the thesis's programs, 4,000 of the bank (2 and
# 4 tellers), 60 power cuts of whole programs, 16 random images per power cut, every bit of the
# heap flipped, jcstress's default preset, and all four transparency runs.
soak-java: deps
	$(CARGO_RUN) build --release -p kioku-cli
	cd java && mvn -B -q -ntp verify -Dkioku.kills=15000 -Dkioku.bankKills=2000 \
	  -Dkioku.programCuts=30 -Dkioku.powerCutSeeds=16 -Dkioku.flips=all \
	  -Djcstress.mode=default -Djcstress.args="-sc false" -Djcstress.budget=0 \
	  -Dkioku.transparency.runs=plain,agent,agent-pool,persistent

# The accessed-page tracker's accuracy at 256 MiB with five hot sets per pattern and backend,
# and the huge-page placement tests (Rust and C) ten times over (about 15 minutes).
soak-hugepage: deps
	KIOKU_HOT_SOAK=1 $(CARGO_RUN) test -p kioku-track --test accessed -- --nocapture
	for i in 1 2 3 4 5 6 7 8 9 10; do \
	  $(CARGO_RUN) test -q -p kioku-hugepage --test placement && \
	  $(CARGO_RUN) test -q -p kioku-capi --test c_hot || exit 1; \
	done

# kioku-cache: power cuts at every ordering point of 32 more traffic seeds (random crash images
# included, every image of up to 16 pending lines), and the hot-item placement test ten times.
soak-cache: deps
	KIOKU_CACHE_POWER_CUT_SEEDS=32 KIOKU_EXHAUSTIVE_LINES=16 \
	  $(CARGO_RUN) test -p kioku-cache --test power_cut -- --nocapture
	for i in 1 2 3 4 5 6 7 8 9 10; do \
	  $(CARGO_RUN) test -q -p kioku-cache --test hot_placement || exit 1; \
	done

# Coverage-guided fuzzing (libFuzzer, stable toolchain) of every parser of untrusted bytes,
# FUZZ_SECS per target, growing fuzz/corpus/; `make test` replays the corpora and regressions
# and runs a few seconds of mutations per target (crates/fuzz/tests/corpus.rs).
FUZZ_SECS ?= 300
fuzz: deps fuzz-java
	scripts/fuzz.sh $(FUZZ_SECS)

# The Java pool reader under Jazzer (java/persist PoolFuzzTest, 5 minutes: its maxDuration);
# what it finds joins the inputs that replay in every test run.
CORPUS_JAVA = persist/src/test/resources/kioku/persist/pool/PoolFuzzTestInputs/openDamagedPool
fuzz-java: deps
	cd java && JAZZER_FUZZ=1 mvn -B -q -ntp -pl persist test \
	  -Dtest=PoolFuzzTest -Dsurefire.failIfNoSpecifiedTests=false
	cp java/persist/.cifuzz-corpus/kioku.persist.pool.PoolFuzzTest/openDamagedPool/* java/$(CORPUS_JAVA)/

# Benchmarks (not part of `make test`); each writes its section of docs/perf.md.
bench:
	@scripts/deps.sh bench
	bench/run-all.sh

clean:
	$(CARGO_RUN) clean
	cd java && mvn -q clean
	rm -rf .kioku fuzz/target
