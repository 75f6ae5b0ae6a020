# The same words everywhere: make demo, make test, make test-tsan,
# make bench, make bench-quick, make fuzz.
#
# Every target installs the Debian packages it needs first.

SWIFT ?= swift
LIB_PACKAGES   := liblz4-dev libxxhash-dev
BENCH_PACKAGES := $(LIB_PACKAGES) libsqlite3-dev liblmdb-dev

.PHONY: deps bench-deps demo test test-tsan bench bench-quick fuzz format lint clean

deps:
	@scripts/ensure-packages.sh $(LIB_PACKAGES)

bench-deps:
	@scripts/ensure-packages.sh $(BENCH_PACKAGES)

## demo: build and run the README quick start, models and observing
## examples against fresh stores.
demo: deps
	$(SWIFT) build -c release --product cairn-demo
	$(SWIFT) build -c release --product cairn-models-demo
	$(SWIFT) build -c release --product cairn-observe-demo
	rm -rf /tmp/cairn-demo /tmp/cairn-models-demo /tmp/cairn-observe-demo
	.build/release/cairn-demo /tmp/cairn-demo
	.build/release/cairn-models-demo /tmp/cairn-models-demo
	.build/release/cairn-observe-demo /tmp/cairn-observe-demo

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

## test-tsan: the whole suite under ThreadSanitizer.
test-tsan: deps
	$(SWIFT) build --build-tests --sanitize=thread
	CAIRN_SANITIZER=thread $(SWIFT) test --sanitize=thread

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

## fuzz: the file-reader fuzzer (libFuzzer + ASan) for FUZZ_TIME seconds.
## New inputs go to out/fuzz-corpus, crashes to out/fuzz-artifacts; each
## crash becomes a file in Tests/Fuzz/regressions, which `make test` replays.
FUZZ_TIME ?= 600
fuzz: deps
	$(SWIFT) build -c release --product FuzzStore --sanitize=fuzzer --sanitize=address \
		-Xswiftc -DFUZZING --build-path .build/fuzz
	mkdir -p out/fuzz-corpus out/fuzz-artifacts
	.build/fuzz/release/FuzzStore -max_total_time=$(FUZZ_TIME) -rss_limit_mb=4096 -timeout=30 \
		-artifact_prefix=out/fuzz-artifacts/ out/fuzz-corpus Tests/Fuzz/seeds Tests/Fuzz/corpus Tests/Fuzz/regressions

## format, lint: swift-format over every source file.
format:
	$(SWIFT) format format --in-place --recursive --parallel Package.swift Sources Tests Benchmarks/Package.swift Benchmarks/Sources

lint:
	$(SWIFT) format lint --recursive --parallel Package.swift Sources Tests Benchmarks/Package.swift Benchmarks/Sources

clean:
	rm -rf .build Benchmarks/.build
