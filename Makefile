# Arbiter. `make run` serves the bundled policies on loopback; `make test`
# runs everything CI runs. Needs only Go (and Node for the SDK interop test).

GO        ?= go
BIN       := bin
ARBITER   := $(BIN)/arbiter
OPA       := $(BIN)/opa
# opa-check runs the `opa` on PATH when there is one (an OPA user's own),
# else the stock one built from go.mod.
PATH_OPA  := $(shell command -v opa 2>/dev/null)
OPA_CHECK := $(or $(PATH_OPA),$(OPA))
POLICIES  := policies
SCHEMAS   := schemas
TESTS     := policy_test
ADDR      ?= 127.0.0.1:8181
FUZZTIME  ?= 30s
FUZZFLAGS ?=
# TESTFLAGS adds flags to the Go tests: .ci/rule-edit passes -short, which
# runs what a rule edit can change (internal/ruleedit: it skips the suites
# that read no rule file and the tests not about the rules), and RACE= (a rule
# edit changes no Go, so there is no new race to find, and the tests run at
# three times the speed).
TESTFLAGS ?=
RACE      ?= -race
# TEST_PKGS: the packages of the Go tests with RACE= (.ci/rule-edit passes
# those whose tests name a rule folder).
TEST_PKGS ?= ./...
# -parallel 8: the real-binary tests of cmd/arbiter wait on processes more than
# they compute, so more of them run at once than the machine has cores.
GOTEST    := $(GO) test $(RACE) -count=1 -parallel 8 $(TESTFLAGS)

.PHONY: all build run test test-all test-race test-norace test-policies ui-e2e rule-edit ci check opa-check fmt lint regal vet bench bench-quick fuzz fuzz-quick diff-corpus fleet man clean

all: build

build: $(ARBITER)

# Always rebuilt: go's own cache makes this cheap and never stale. The
# version `arbiter version` and /v1/status name is the checkout's.
VERSION   ?= $(shell git describe --always --dirty 2>/dev/null)
$(ARBITER): FORCE
	$(GO) build -ldflags "-X main.version=$(VERSION)" -o $@ ./cmd/arbiter

# The stock OPA binary of the version in go.mod (a go.mod tool), our
# yardstick and compatibility target: go tool -n builds it once into the
# Go cache and names the executable there, which is copied, not linked again.
$(OPA): go.mod go.sum
	@mkdir -p $(BIN)
	cp "$$($(GO) tool -n opa)" $@

# Regal, the Rego linter, a tool of its own module (tools/regal/go.mod): it
# pins an older OPA than ours, so it cannot be a tool of the main module.
# go tool builds it once and keeps the executable in the Go cache.
REGAL     := $(GO) tool -modfile=tools/regal/go.mod regal

FORCE:

run: build
	$(ARBITER) serve --addr $(ADDR)

# test: vet; the Go tests, with the race detector where goroutines meet in
# the test process (RACE_PKGS); without it for NORACE_PKGS, whose tests run
# one goroutine or drive the built binary in child processes, out of the
# detector's sight (cmd/arbiter), and for the single-goroutine differential
# suites of engine and engine/ireval (NORACE_TESTS: OPA's conformance cases,
# the compiled evaluator's semantics, the compiled evaluator and the
# projection over the corpus, the fixtures and their fuzz seeds, the
# evidence over the corpus), which skip under -race
# (internal/race), where they cost five to ten times as much, and server's
# TestOnePassPerRequest, which counts the bytes a request allocates (the
# detector empties sync.Pool at random). So every test
# runs once, and the race build leaves out cmd/arbiter's own dependencies
# (OpenTelemetry's exporters, gRPC). The two sets run at once, and beside
# them stock `opa check/fmt/test` on the same files, `arbiter check` and
# `arbiter test` (test-policies), each one's output printed whole when it
# ends (make -O): cmd/arbiter's tests mostly wait on processes. (Running the
# differential suites as a third set at once cost more CPU than it saved
# time: CI took 280 and 305 s against 263.) RACE= runs every Go test in one
# go test.
NORACE_PKGS  := ./cmd/arbiter ./engine/input ./internal/corpus ./internal/norules ./deploy ./bench/e2e ./fleet
NORACE_TESTS := TestSemantics TestOPAConformanceCases TestCompiledAgreesOnCorpus TestProjectionAgreesOnCorpus \
                TestEvidenceIsComplete TestCompiledAgreesOnFixtures TestProjectionAgreesOnFixtures \
                TestProjectionLeavesOutWhatNoRuleReads FuzzCompiledAgrees FuzzProjectionAgrees TestEdits TestOnePassPerRequest
empty        :=
NORACE_RUN   := ^($(subst $(empty) $(empty),|,$(strip $(NORACE_TESTS))))$$
RACE_PKGS     = $(filter-out $(patsubst ./%,$(MODULE)/%,$(NORACE_PKGS)),$(shell $(GO) list ./...))
MODULE        = $(shell $(GO) list -m)
# The binary make build stamped is the one cmd/arbiter's and the fleet's
# tests boot (ARBITER_BIN, ARBITER_VERSION); outside a git checkout
# (no VERSION) cmd/arbiter's TestMain builds one stamped for the test.
TEST_ENV  = OPA_BIN=$(abspath $(OPA)) $(if $(VERSION),ARBITER_BIN=$(abspath $(ARBITER)) ARBITER_VERSION=$(VERSION))
ifeq ($(RACE),)
TEST_SETS = test-all
else
TEST_SETS = test-race test-norace
endif
test: vet build $(OPA)
	$(MAKE) --no-print-directory -j -O $(TEST_SETS) test-policies

test-all:
	$(TEST_ENV) $(GOTEST) $(TEST_PKGS)

test-race:
	$(TEST_ENV) $(GOTEST) $(RACE_PKGS)

test-norace:
	$(TEST_ENV) $(GO) test -count=1 -parallel 8 $(TESTFLAGS) $(NORACE_PKGS)
	$(GO) test -count=1 $(TESTFLAGS) -run '$(NORACE_RUN)' ./engine/ ./engine/ireval/ ./diff/ ./server/

test-policies: opa-check
	$(ARBITER) check
	$(ARBITER) test --coverage --threshold 95

ci: test ui-e2e bench-quick rule-edit lint fleet

# rule-edit: a rule edit made with files alone passes make test (.ci/rule-edit).
rule-edit:
	.ci/rule-edit

# ui-e2e: the /ui pages in Debian's Chromium against the real binary, driven
# by playwright-core (server/ui/e2e/package-lock.json): the main flow with
# the mouse and with the keyboard alone, live rows, 1280x800 readability,
# the diff and the promotion gate on the policy page (diff.test.mjs), the
# charts and a shadow candidate's answer (charts.test.mjs), and a
# page load with 10,000 decisions in memory (measured, printed).
# Needs: apt-get install -y chromium chromium-driver; npm ci --prefix server/ui/e2e.
# UPDATE_SCREENSHOTS=1 also copies the screenshots to docs/ui/.
ui-e2e: build
	cd server/ui/e2e && ARBITER_BIN=$(abspath $(ARBITER)) node --test

opa-check: $(if $(PATH_OPA),,$(OPA))
	@echo "opa-check: $(OPA_CHECK), $$($(OPA_CHECK) version | head -1)"
	$(OPA_CHECK) check --strict $(POLICIES) $(TESTS)
	$(OPA_CHECK) check --strict -s $(SCHEMAS) $(POLICIES) $(TESTS)
	@out="$$($(OPA_CHECK) fmt --list $(POLICIES) $(TESTS))"; if [ -n "$$out" ]; then echo "not opa-fmt formatted:"; echo "$$out"; exit 1; fi
	$(OPA_CHECK) test $(POLICIES) $(TESTS)

check: build
	$(ARBITER) check

vet:
	$(GO) vet ./...

fmt: $(OPA)
	gofmt -w $$(git ls-files '*.go')
	$(OPA) fmt -w $(POLICIES) $(TESTS)

lint: vet regal
	@out="$$(gofmt -l $$(git ls-files '*.go'))"; if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) tool staticcheck ./...
	$(GO) mod tidy -diff
	cd tools/regal && $(GO) mod tidy -diff

# regal: Regal lints the Rego (configuration and the reason for each rule
# turned off: .regal/config.yaml); any finding fails.
regal:
	$(REGAL) lint $(POLICIES) $(TESTS)

# bench: the report of docs/BENCHMARKS.md, printed and written: the engine's
# in-process benchmarks, Arbiter against stock OPA over loopback (wrk from the
# machine's packages: apt-get install -y wrk), and Runner state sizes up to
# 16 MiB. About 6 minutes. BENCHFLAGS passes flags to the driver, e.g.
# BENCHFLAGS='-reps 5 -duration 20s' (go run ./bench/e2e -h lists them).
# The hand-written floor (engine/testdata/floor) restates the rules in Go,
# so only make bench builds it (-tags benchfloor, also in the driver's
# in-process run): first TestFloorMatchesEngine checks that it still
# decides the corpus and the fixtures as the engine does, so that a floor
# left behind by a rule edit is reported where its figures are produced.
BENCHFLAGS ?=

bench:
	$(GO) test -count=1 -tags benchfloor -run '^TestFloorMatchesEngine$$' ./engine/
	$(GO) run ./bench/e2e $(BENCHFLAGS)

# Keeps the benchmarks and the driver compiling and running in CI; never a
# timed assertion. Without -tags benchfloor: the floor restates the rules,
# so a rule edit must not break CI through it (make bench checks it). The
# driver's smoke run needs only Go (it skips its load runs when wrk is
# missing), runs no in-process benchmark and writes nothing. -short and
# -benchtime 1x: each benchmark runs once, BenchmarkSize at its smallest
# size only (the larger ones cost a minute of CI and prove nothing more).
# Only the packages that have benchmarks: linking the others' test binaries
# again cost half a minute of CPU and ran nothing.
BENCH_PKGS = $(addprefix ./,$(sort $(patsubst %/,%,$(dir $(shell git grep -l '^func Benchmark' -- '*_test.go')))))
bench-quick:
	$(GO) test -short -run '^$$' -bench . -benchtime 1x $(BENCH_PKGS)
	$(GO) run ./bench/e2e -quick

# Fuzz targets, as PACKAGE:TARGET: the input boundary (engine/input: the
# strict decoder, the walk against the shipped schema and against generated
# schemas, each compared with the JSON Schema library), the whole decision
# path (engine/fuzz_test.go), and the compiled evaluator's differential
# targets (engine/compiled_test.go, engine/projection_test.go). Their seeds
# (the fixtures, every number form, any JSON shape) run in make test as
# unit tests. Crashers are kept in testdata/fuzz/<Target>/. FUZZTIME=10m
# for a long run of each.
FUZZ_TARGETS := engine/input:FuzzDecode engine/input:FuzzRepositorySchemas engine/input:FuzzGeneratedSchemas \
	engine:FuzzDecide engine:FuzzCompiledAgrees engine:FuzzProjectionAgrees

#
# Each package's targets run from one test binary, built once with the
# fuzzing instrumentation (go test -c -fuzz), in the package's folder as
# go test -fuzz runs it: new crashers go to its testdata/fuzz/<Target>/ and
# the generated corpus to the Go cache, where go test -fuzz keeps it.
# FUZZFLAGS are the binary's flags (-test.parallel=1).
FUZZ_PKGS  = $(sort $(foreach t,$(FUZZ_TARGETS),$(firstword $(subst :, ,$(t)))))
FUZZ_CACHE = $(shell $(GO) env GOCACHE)/fuzz/$(MODULE)
fuzz:
	@set -e; for p in $(FUZZ_PKGS); do \
	  $(GO) test -c -fuzz . -o $(BIN)/fuzz/$$p.test ./$$p/; \
	done; \
	for t in $(FUZZ_TARGETS); do \
	  p=$${t%%:*}; echo "fuzz $${t#*:} for $(FUZZTIME)"; \
	  (cd $$p && $(abspath $(BIN))/fuzz/$$p.test -test.run '^$$' -test.fuzz "^$${t#*:}$$" \
	    -test.fuzztime $(FUZZTIME) -test.fuzzcachedir $(FUZZ_CACHE)/$$p $(FUZZFLAGS)); \
	done

# A smoke run, not in CI (make test runs every seed; instrumenting OPA's
# module graph for coverage cost a fifth of CI's CPU): each target fuzzes
# FUZZEXECS inputs (its seeds' baseline included) on one worker. A count,
# not a time:
# Go's fuzzer can report the end of a timed run as "context deadline
# exceeded" (it reads its own deadline's cancellation before the workers'
# context has it), which failed CI once; and a count makes each run do the
# same work on a loaded machine as on a quiet one. When fuzzing, the
# targets add an even spread of their seeds (testfiles.FuzzSeeds), so most
# of the count mutates.
FUZZEXECS ?= 300
fuzz-quick:
	$(MAKE) --no-print-directory fuzz FUZZFLAGS=-test.parallel=1 FUZZTIME=$(FUZZEXECS)x

# diff-corpus: arbiter diff against every edit of diff/testdata/edits, each
# verdict golden, every found confirmed and every none checked against
# 20,000 generated inputs under stock OPA (DIFF_FLAGS=-short: 2,000). Some
# minutes; make test runs the edits marked "ci" (docs/DIFF.md).
DIFF_FLAGS ?=
diff-corpus:
	DIFF_CORPUS=1 $(GO) test -count=1 -timeout 90m $(DIFF_FLAGS) -run '^TestEdits$$' ./diff/

# fleet: three replicas behind nginx, bundles from nginx (HTTP) and a
# docker-registry (OCI, pushed with oras), uploads to a log sink, under load
# (fleet/fleet_test.go). Needs: apt-get install -y nginx docker-registry;
# go install oras.land/oras/cmd/oras@v1.3.6 (.ci/run does both). FLEET_REPORT=FILE
# writes the measured figures as JSON.
fleet: build
	FLEET=1 ARBITER_BIN=$(abspath $(ARBITER)) $(GO) test -count=1 -v -timeout 15m -run '^TestFleet$$' ./fleet/

# The man pages of every command, from the commands themselves (cobra's doc
# package, in cmd/arbiter's TestCLIDocs); not committed: docs/cli/ has the
# same pages in Markdown.
man:
	$(GO) test -count=1 -run '^TestCLIDocs$$' ./cmd/arbiter/ -man $(CURDIR)/build/man

clean:
	rm -rf $(BIN) build
