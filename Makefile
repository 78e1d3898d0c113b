# coordtorture — see README.md. Every target works from a clean clone with only Go
# and apt: `make servers` fetches the server builds it needs first.
SHELL := /bin/bash
GO ?= go
SERVERS_DIR ?= $(CURDIR)/.servers
TEST_TIMEOUT ?= 25m
export COORDTORTURE_SERVERS_DIR := $(SERVERS_DIR)

.PHONY: all servers images browser build test test-short lint vet fmt bench server-cost torture torture-full torture-docker torture-long clean help
TORTURE_DURATION ?= 5s
TORTURE_IMPL ?= all
TORTURE_LONG_DURATION ?= 1m
TORTURE_OUT ?= runs/latest
TORTURE_FLAGS ?=
# TORTURE_PARALLEL: --parallel N (coordtorture's default: one run per two
# cores, so one on two cores).
TORTURE_PARALLEL ?=
# The default suite, a few minutes on two cores: every family, and each of
# these kinds of fault once (partition of a client link and of a node, latency,
# reset-peer, black-hole, lost replies, a client's GC stall, SIGSTOP, kill
# -9 with and without AOF, a restart of the fenced resource, eviction,
# Sentinel failover (waiting-lock/failover), a forced failover (replication
# cut first: fenced-lock/failover-forced) and a promotion by hand, CLUSTER
# FAILOVER, clock skew), prim beside the peers on the lock, rate limiter
# and Redlock families' baselines and one fault each; PATTERN@prim runs a
# scenario for prim alone. torture-full runs the larger suite (every lock
# scenario beside the peers), torture-long every scenario on every build.
TORTURE_SUITE ?= fenced-lock/baseline fenced-lock/pause-client fenced-lock/kill-restart-noaof \
	fenced-lock/partition-client@prim fenced-lock/reset-peer@prim fenced-lock/black-hole@prim fenced-lock/lose-replies@prim \
	fenced-lock/kill-restart-aof@prim fenced-lock/resource-restart@prim fenced-lock/eviction@prim fenced-lock/promote-replica@prim \
	fenced-lock/failover-forced@prim \
	waiting-lock/failover hash-lease/failover-cluster semaphore/baseline latch/baseline rwlock/pause-primary \
	ratelimit/bucket/latency ratelimit/fixed/clock-skew ratelimit/sliding/baseline redlock/baseline redlock/partition-minority
# The full suite: every lock family, a representative part of the ratelimit
# family (each algorithm's baseline, one fault that must hold and one hazard
# each), of the semaphore family (its baseline and its restart without
# persistence, a hazard), of the rwlock and redlock families (their
# baselines and one fault that must hold); SCENARIOS=ratelimit (or any
# patterns) runs others, and torture-long runs every scenario.
TORTURE_FULL_SUITE ?= fenced-lock waiting-lock hash-lease ratelimit/*/baseline ratelimit/fixed/partition-client \
	ratelimit/sliding/pause-primary ratelimit/bucket/latency ratelimit/sliding/kill-restart-noaof ratelimit/bucket/clock-skew \
	semaphore/baseline semaphore/kill-restart-noaof latch/baseline latch/reset-race rwlock/baseline rwlock/partition-client \
	redlock/baseline redlock/partition-client
TORTURE_FULL_OUT ?= runs/full
BIN ?= bin

# GNU make exits 2 whenever a recipe fails, whatever its status: the torture
# targets print coordtorture's own status (1: a must-hold property FAILed;
# 2: UNKNOWN, or the run could not start) before make turns it into 2.
# bin/coordtorture gives the documented status directly.
define coordtorture-status
status=$$?; if [ $$status -ne 0 ]; then echo "coordtorture exited $$status ($$([ $$status -eq 1 ] && echo 'FAIL: a must-hold property broke' || echo 'UNKNOWN, a usage error, or the run could not start')); make reports it as Error $$status and exits 2: run $(BIN)/coordtorture for its own exit status" >&2; fi; exit $$status
endef

all: test

help: ## list targets
	@grep -E '^[a-z-]+:.*##' $(MAKEFILE_LIST) | sed 's/:.*## /\t/'

servers: ## fetch the pinned Redis/Valkey builds into .servers/ (idempotent; launchers in .servers/<build>/bin/)
	@scripts/fetch-servers.sh

images: servers ## local Docker images coordtorture/redis:7.0 … coordtorture/valkey:9.1 from .servers/ (no base image, no registry; rebuilt only when a tree changed)
	@scripts/build-images.sh

browser: ## fetch headless chromium into .servers/chromium/ for the HTML report test (idempotent; make test needs it)
	@scripts/fetch-chromium.sh

# The repository's Go modules: the harness, prim (a module of its own, so a
# service importing it gets none of the harness's dependencies), and prim's tests
# against the testbed. `go test ./...` does not enter a nested module: each
# target below runs in every one (all of them, then the first failure's status).
MODULES := . prim prim/internal/servertest
in_modules = rc=0; for m in $(MODULES); do echo "== module $$m"; (cd $$m && $(1)) || rc=1; done; exit $$rc

# prim/internal/servertest, then prim, run beside the root module: their tests
# mostly wait on servers and timers, so on two cores the suite takes about the
# root module's time instead of the sum (prim's two minutes after the root
# module's fifteen made a CI run eighteen and a half). Their output is held and
# printed when the root module is done.
SIDE_MODULES := prim/internal/servertest prim
test: servers browser lint ## the full test suite, on every server build of the matrix
	@log=$$(mktemp); trap 'rm -f "$$log"' EXIT; \
	  (rc=0; for m in $(SIDE_MODULES); do echo "== module $$m"; \
	    (cd $$m && $(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) ./...) || rc=1; done; exit $$rc) >"$$log" 2>&1 & side=$$!; \
	  echo "== modules $(SIDE_MODULES) (running beside the others; their output follows)"; \
	  rc=0; for m in $(filter-out $(SIDE_MODULES),$(MODULES)); do echo "== module $$m"; \
	    (cd $$m && $(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) ./...) || rc=1; done; \
	  wait $$side || rc=1; cat "$$log"; exit $$rc

test-short: servers browser ## quick run on the default build only
	@$(call in_modules,COORDTORTURE_SERVERS=redis-8.0 $(GO) test -count=1 -timeout 10m ./...)

STATICCHECK_VERSION ?= v0.8.2
STATICCHECK := $(SERVERS_DIR)/bin/staticcheck

$(STATICCHECK):
	GOBIN=$(SERVERS_DIR)/bin $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)

lint: vet $(STATICCHECK) ## gofmt, go vet and staticcheck
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	  if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	@$(call in_modules,$(abspath $(STATICCHECK)) ./...)

vet:
	@$(call in_modules,$(GO) vet ./...)

build: ## build bin/coordtorture and bin/fencecheck (their exit status: 0 held, 1 FAIL, 2 UNKNOWN or usage error)
	$(GO) build -o $(BIN)/ ./cmd/coordtorture ./cmd/fencecheck

torture: servers build ## the default suite (TORTURE_SUITE: every family, each kind of fault listed above it, prim beside the peers; a few minutes; SCENARIOS=… for others), on local servers (report in runs/latest)
	@cmd='$(BIN)/coordtorture run --impl $(TORTURE_IMPL) --duration $(TORTURE_DURATION) $(if $(TORTURE_PARALLEL),--parallel $(TORTURE_PARALLEL)) --out $(TORTURE_OUT) $(TORTURE_FLAGS) $(or $(SCENARIOS),$(TORTURE_SUITE))'; echo "$$cmd"; set -f; $$cmd; $(coordtorture-status)

torture-full: servers build ## the larger suite (TORTURE_FULL_SUITE: every lock scenario beside the peers, part of the others; 15 minutes or more on two cores), report in runs/full
	@cmd='$(BIN)/coordtorture run --impl $(TORTURE_IMPL) --duration $(TORTURE_DURATION) $(if $(TORTURE_PARALLEL),--parallel $(TORTURE_PARALLEL)) --out $(TORTURE_FULL_OUT) $(TORTURE_FLAGS) $(or $(SCENARIOS),$(TORTURE_FULL_SUITE))'; echo "$$cmd"; set -f; $$cmd; $(coordtorture-status)

torture-docker: images build ## the default suite with every server in a container (the docker provider; local images from make images, or TORTURE_IMAGE=…)
	@cmd='$(BIN)/coordtorture run --provider docker $(if $(TORTURE_IMAGE),--image $(TORTURE_IMAGE)) --impl $(TORTURE_IMPL) --duration $(TORTURE_DURATION) --out $(or $(TORTURE_OUT_DOCKER),runs/docker) $(TORTURE_FLAGS) $(or $(SCENARIOS),$(TORTURE_SUITE))'; echo "$$cmd"; set -f; $$cmd; $(coordtorture-status)

torture-long: servers build ## the suite on every fetched build, TORTURE_LONG_DURATION (1m) a scenario: about 5 hours (five builds)
	@cmd='$(BIN)/coordtorture matrix --impl $(TORTURE_IMPL) --duration $(TORTURE_LONG_DURATION) --out runs/long $(TORTURE_FLAGS) $(SCENARIOS)'; echo "$$cmd"; set -f; $$cmd; $(coordtorture-status)

BENCH_BUILD ?= redis-8.6
bench: servers ## benchmarks (prim beside its peers on one build: BENCH_BUILD, redis-8.6 by default, whose DELEX/SET IFEQ prim's fast paths use)
	@$(call in_modules,COORDTORTURE_SERVERS=$(BENCH_BUILD) $(GO) test -run '^$$' -bench . -benchmem -benchtime 2s ./...)

server-cost: servers ## instructions per call each lock command costs the server (callgrind: the system's valgrind, else Debian's fetched into .servers/valgrind; BUILD=valkey-9.1 for another build)
	@scripts/server-cost.sh $(BUILD)

clean: ## remove fetched servers
	rm -rf .servers .images
