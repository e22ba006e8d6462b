# mcnode. `make demo` runs a demo group on this host; `make test` runs every
# test (as root it also runs the real-multicast and multi-host tests, each in
# private network namespaces it creates and removes itself).

GO ?= go
export PATH := $(PATH):/usr/local/go/bin

.PHONY: all build demo test vet fuzz sweep chaos bench bench-go clean

all: build

# The commit for mcnode --version, where go build records none (-buildvcs=false
# in GOFLAGS, or a git worktree): see buildRevision in cmd/mcnode/version.go.
VCS_REVISION := $(shell git rev-parse HEAD 2>/dev/null)
VCS_TIME := $(shell TZ=UTC0 git show -s --date=format-local:%Y-%m-%dT%H:%M:%SZ --format=%cd HEAD 2>/dev/null)
VCS_MODIFIED := $(shell git status --porcelain 2>/dev/null | grep -q . && echo true || echo false)
LDFLAGS := -X main.buildRevision=$(VCS_REVISION) -X main.buildTime=$(VCS_TIME) -X main.buildModified=$(VCS_MODIFIED)

build:
	$(GO) build -ldflags '$(LDFLAGS)' -o bin/mcnode ./cmd/mcnode

demo:
	$(GO) run ./cmd/mcnode demo

# The end-to-end tests (cmd/mcnode) have real-time bounds (lease expiry,
# reclaim): they run after the CPU-heavy simulations, not beside them.
test: vet
	$(GO) test -race -timeout 40m $$($(GO) list ./... | grep -v /cmd/mcnode$$)
	$(GO) test -race -timeout 20m ./cmd/mcnode

vet:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt would change: $$out"; exit 1; fi
	$(GO) vet ./...

# Coverage-guided fuzzing of the decoders and the state machines (not part of
# `make test`, which replays each target's testdata/fuzz corpus).
fuzz:
	$(GO) test ./wire -run '^$$' -fuzz '^FuzzDecode$$' -fuzztime 60s
	$(GO) test ./wire -run '^$$' -fuzz '^FuzzDecodeFast$$' -fuzztime 30s
	$(GO) test ./wire -run '^$$' -fuzz '^FuzzAppendFast$$' -fuzztime 30s -fuzzminimizetime 1s
	$(GO) test ./wire -run '^$$' -fuzz '^FuzzSnapshot$$' -fuzztime 30s
	$(GO) test ./quorumfallback/qnet -run '^$$' -fuzz '^FuzzDecodeFrame$$' -fuzztime 30s
	$(GO) test ./quorumfallback/protocols -run '^$$' -fuzz '^FuzzMachineStep$$' -fuzztime 30s
	$(GO) test ./arbiter -run '^$$' -fuzz '^FuzzStep$$' -fuzztime 60s
	$(GO) test ./arbiter -run '^$$' -fuzz '^FuzzInstalledState$$' -fuzztime 60s
	$(GO) test ./seal -run '^$$' -fuzz '^FuzzOpen$$' -fuzztime 60s
	$(GO) test ./group/sockfilter -run '^$$' -fuzz '^FuzzAddressed$$' -fuzztime 30s
	$(GO) test ./group -run '^$$' -fuzz '^FuzzReceiveSealed$$' -fuzztime 120s
	$(GO) test ./cmd/mcnode -run '^$$' -fuzz '^FuzzSentName$$' -fuzztime 30s

# The multicast arbiter against every quorum protocol, side by side (about
# 20 minutes on 2 cores; docs/BENCHMARKS.md shows one run). Add flags with ARGS=...
bench:
	$(GO) run ./cmd/mcnode bench $(ARGS)

# The hot paths' micro-benchmarks, with allocations.
bench-go:
	$(GO) test -run '^$$' -bench . -benchmem -benchtime 20000x ./wire ./seal ./arbiter ./group ./quorumfallback/...

# A wider seeded sweep than the default 1000 seeds.
sweep:
	MCNODE_SIM_SEEDS=20000 $(GO) test ./internal/simtest -run TestPropertySeeded -timeout 60m -v
	MCNODE_QSIM_SEEDS=20000 $(GO) test ./quorumfallback/protocols -run TestPropertySeeded -timeout 60m -v

# A randomized soak of five daemons on a LAN of network namespaces: kill -9,
# SIGSTOP, network splits and one-way or lossy links aimed at the server and
# the holders, checking
# mutual exclusion, progress and rejoins (as root; not part of `make test`).
# CHAOS sets its length, SEED replays one run's draws.
chaos:
	MCNODE_CHAOS=$(or $(CHAOS),20m) MCNODE_CHAOS_SEED=$(SEED) $(GO) test ./cmd/mcnode -run '^TestE2EChaosSoak$$' -v -count=1 -timeout 0

clean:
	rm -rf bin
