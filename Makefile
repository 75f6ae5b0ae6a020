# The same words everywhere: make demo, make test, make test-tsan,
# make bench, make bench-quick, make fuzz (and make fuzz-check, its CI form).
#
# Every target installs the Debian packages it needs first.

SWIFT ?= swift
LIB_PACKAGES   := liblz4-dev libxxhash-dev libssl-dev
BENCH_PACKAGES := $(LIB_PACKAGES) libsqlite3-dev liblmdb-dev libsqlcipher-dev

.PHONY: deps bench-deps demo test test-tsan bench bench-quick fuzz fuzz-check fuzz-merge format lint clean

deps:
	@scripts/ensure-packages.sh $(LIB_PACKAGES)

bench-deps:
	@scripts/ensure-packages.sh $(BENCH_PACKAGES)

## demo: build and run the README quick start, models, observing, schema
## relationships and search examples against fresh stores.
demo: deps
	$(SWIFT) build -c release --product cairn-demo
	$(SWIFT) build -c release --product cairn-models-demo
	$(SWIFT) build -c release --product cairn-observe-demo
	$(SWIFT) build -c release --product cairn-schema-demo
	$(SWIFT) build -c release --product cairn-relationships-demo
	$(SWIFT) build -c release --product cairn-search-demo
	rm -rf /tmp/cairn-demo /tmp/cairn-demo-encrypted /tmp/cairn-models-demo /tmp/cairn-observe-demo /tmp/cairn-schema-demo \
		/tmp/cairn-relationships-demo /tmp/cairn-search-demo
	.build/release/cairn-demo /tmp/cairn-demo
	.build/release/cairn-models-demo /tmp/cairn-models-demo
	.build/release/cairn-observe-demo /tmp/cairn-observe-demo
	.build/release/cairn-schema-demo /tmp/cairn-schema-demo
	.build/release/cairn-relationships-demo /tmp/cairn-relationships-demo
	.build/release/cairn-search-demo /tmp/cairn-search-demo

## test: the whole suite, then the benchmark harness end to end at 1/100
## size (no timing is asserted; it proves the harness works). The suite is
## built optimized, with testing enabled: its randomized tests (100,000
## model operations, 2,000 random queries over 10,000 records, thousands of
## crash images) run ten times faster than in a debug build. make test-tsan
## runs the debug build.
TEST_FLAGS := -c release -Xswiftc -enable-testing
test: bench-deps
	$(SWIFT) build --build-tests $(TEST_FLAGS)
	$(SWIFT) test $(TEST_FLAGS) --skip-build
	$(MAKE) bench-quick

## test-tsan: the whole suite under ThreadSanitizer, one test at a time:
## on 2 cores the instrumented suite ran in 503 s serially against 680 s
## with tests in parallel (each concurrency test still starts its own
## threads and tasks). Heavy single-threaded tests run fewer rounds there.
test-tsan: deps
	$(SWIFT) build --build-tests --sanitize=thread
	CAIRN_SANITIZER=thread $(SWIFT) test --sanitize=thread --no-parallel

## bench: the side-by-side harness at full size (its own package in
## Benchmarks/); writes out/bench/results.json, BENCHMARKS.md and the chart.
## BENCH_ARGS passes flags through (e.g. BENCH_ARGS="--workloads delete").
## bench-quick: every workload at 1/100 size, once.
bench: bench-deps
	cd Benchmarks && $(SWIFT) build -c release --product cairn-bench
	cd Benchmarks && .build/release/cairn-bench --out ../out/bench --markdown ../BENCHMARKS.md $(BENCH_ARGS)
	cp out/bench/ratios.svg Benchmarks/ratios.svg

bench-quick: bench-deps
	cd Benchmarks && $(SWIFT) build -c release --product cairn-bench
	cd Benchmarks && .build/release/cairn-bench --quick --out ../out/bench-quick $(BENCH_ARGS)

## fuzz: builds every fuzz target with libFuzzer + AddressSanitizer (and
## fails if a binary is not instrumented for coverage), then fuzzes
## FUZZ_TARGET (store, wal, record, history, cli, ops, shm; default: each in turn)
## for FUZZ_TIME seconds. New inputs go to out/fuzz/<target>/corpus, crashes
## to out/fuzz/<target>/artifacts; a crash becomes a file in
## Tests/Fuzz/<target>/regressions, which `make test` replays. `make
## fuzz-merge FUZZ_TARGET=wal` minimizes the new inputs into Tests/Fuzz/wal.
## fuzz-check: every target for FUZZ_CHECK_TIME seconds from its checked-in
## corpus, two at a time; prints edges, features, corpus and exec/s, and
## fails on a crash or on edges below Tests/Fuzz/floors (CI runs it).
FUZZ_TIME ?= 600
FUZZ_TARGET ?= all
FUZZ_CHECK_TIME ?= 30
FUZZ_TARGETS := store wal record history cli ops shm
fuzz: deps
	scripts/fuzz.sh build
	@for t in $(if $(filter all,$(FUZZ_TARGET)),$(FUZZ_TARGETS),$(FUZZ_TARGET)); do \
		echo "== fuzzing $$t for $(FUZZ_TIME) s"; scripts/fuzz.sh run $$t $(FUZZ_TIME) || exit 1; done

fuzz-check: deps
	scripts/fuzz.sh build
	scripts/fuzz.sh check $(FUZZ_CHECK_TIME)

fuzz-merge:
	@for t in $(if $(filter all,$(FUZZ_TARGET)),$(FUZZ_TARGETS),$(FUZZ_TARGET)); do scripts/fuzz.sh merge $$t; done

## format, lint: swift-format over every source file.
format:
	$(SWIFT) format format --in-place --recursive --parallel Package.swift Sources Tests Benchmarks/Package.swift Benchmarks/Sources

lint:
	$(SWIFT) format lint --recursive --parallel Package.swift Sources Tests Benchmarks/Package.swift Benchmarks/Sources

clean:
	rm -rf .build Benchmarks/.build
