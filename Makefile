# lockproxy developer entry points. `make` alone prints this list.

# A fresh Debian machine has Go in /usr/local/go/bin without it on PATH.
export PATH := $(PATH):/usr/local/go/bin

GO         ?= go
BIN        := bin
BENCHFLAGS ?=
# The commit `lockproxy -version` prints: GOFLAGS may carry -buildvcs=false,
# which leaves it out of the build info, so it is set explicitly.
COMMIT     := $(shell git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)$(shell git diff --quiet HEAD 2>/dev/null || echo -dirty)
LDFLAGS    ?= -X main.commit=$(COMMIT)
# The race detector and real redis-server processes make the suite slow on
# small machines; 9m stays under the usual 10m CI step limit.
TESTFLAGS ?= -race -count=1 -timeout 9m

.DEFAULT_GOAL := help
.PHONY: help build run test bench pgo lint chaos clean

help: ## print this list
	@echo "lockproxy make targets:"
	@grep -E '^[a-z]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{ printf "  make %-6s %s\n", $$1, $$2 }'

build: ## build bin/lockproxy and bin/lockbench
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN)/ ./cmd/...

run: ## start 5 local redis masters (127.0.0.1:7001-7005) and lockproxy on 127.0.0.1:7379
	scripts/run.sh

test: ## go vet, then all tests with the race detector against real redis-server
	$(GO) vet ./...
	$(GO) test $(TESTFLAGS) ./...

bench: ## lockproxy vs redsync vs one direct redis on masters it starts (BENCHFLAGS=... for lockbench)
	$(GO) run ./cmd/lockbench $(BENCHFLAGS)

pgo: ## refresh cmd/lockproxy/default.pgo, the profile go build optimizes lockproxy with
	scripts/pgo.sh

lint: ## gofmt (must list nothing) and go vet
	@out=$$(gofmt -l .); if [ -n "$$out" ]; then echo "gofmt -l: these files need gofmt -w:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...

chaos: ## long fault-injection tests (kill, pause, restart masters), up to 30m
	LOCKPROXY_CHAOS=long $(GO) test -race -count=1 -run Chaos -timeout 30m ./...

clean: ## remove build output, make run's data and bench output
	rm -rf $(BIN) .run bench/out
