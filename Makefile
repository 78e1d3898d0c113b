# coordtorture — see README.md. Every target works from a clean clone with only Go
# and apt: `make servers` fetches the server builds it needs first.
SHELL := /bin/bash
GO ?= go
SERVERS_DIR ?= $(CURDIR)/.servers
TEST_TIMEOUT ?= 18m
export COORDTORTURE_SERVERS_DIR := $(SERVERS_DIR)

.PHONY: all servers test test-short lint vet fmt bench server-cost torture torture-long clean help
TORTURE_DURATION ?= 5s
TORTURE_IMPL ?= all
TORTURE_LONG_DURATION ?= 1m
TORTURE_OUT ?= runs/latest

all: test

help: ## list targets
	@grep -E '^[a-z-]+:.*##' $(MAKEFILE_LIST) | sed 's/:.*## /\t/'

servers: ## fetch the pinned Redis/Valkey builds into .servers/ (idempotent; launchers in .servers/<build>/bin/)
	@scripts/fetch-servers.sh

.PHONY: browser
browser: ## fetch headless chromium into .servers/chromium/ for the HTML report test (idempotent; make test needs it)
	@scripts/fetch-chromium.sh

test: servers browser lint ## the full test suite, on every server build of the matrix
	$(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) ./...

test-short: servers browser ## quick run on the default build only
	COORDTORTURE_SERVERS=redis-8.0 $(GO) test -count=1 -timeout 10m ./...

STATICCHECK_VERSION ?= v0.8.2
STATICCHECK := $(SERVERS_DIR)/bin/staticcheck

$(STATICCHECK):
	GOBIN=$(SERVERS_DIR)/bin $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)

lint: vet $(STATICCHECK) ## gofmt, go vet and staticcheck
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	  if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(STATICCHECK) ./...

vet:
	$(GO) vet ./...

torture: servers ## the default suite: every scenario, prim and the peer libraries, on local servers (report in runs/latest)
	$(GO) run ./cmd/coordtorture run --impl $(TORTURE_IMPL) --duration $(TORTURE_DURATION) --out $(TORTURE_OUT) $(SCENARIOS)

torture-long: servers ## the suite on every fetched build, TORTURE_LONG_DURATION (1m) a scenario: about 4 hours
	$(GO) run ./cmd/coordtorture matrix --impl $(TORTURE_IMPL) --duration $(TORTURE_LONG_DURATION) --out runs/long $(SCENARIOS)

bench: servers ## benchmarks (prim beside its peers on the default build)
	COORDTORTURE_SERVERS=redis-8.0 $(GO) test -run '^$$' -bench . -benchmem -benchtime 2s ./...

server-cost: servers ## instructions per call each lock command costs the server (callgrind; needs valgrind; BUILD=valkey-9.1 for another build)
	@scripts/server-cost.sh $(BUILD)

clean: ## remove fetched servers
	rm -rf .servers .images
