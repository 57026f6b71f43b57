# sluice — make run starts a server, make test runs every test.
GO      ?= go
BIN     ?= bin/sluice
PKGS    ?= ./...

.PHONY: all build run test test-docs test-short race vet fmt chaos bench bench-compare bench-onecore bench-envoy bench-peer bench-memory bench-scaling bench-libraries bench-accuracy fuzz image docker clean

all: build

build:
	$(GO) build -o $(BIN) ./cmd/sluice

# A complete single-node server: RESP on 127.0.0.1:6380, HTTP on :9380.
run: build
	./$(BIN) --data-dir ./sluice-data

# Every test with the race detector, plus gofmt and go vet, in the main
# module, in the Go client's module (clients/go, a module of its own) and in
# the protocol module it shares with the server (protocol/); the
# Helm chart's test module (deploy/charttest, which keeps Helm's and
# Kubernetes' libraries out of the main module; it renders templates and
# starts no goroutines of its own, so it runs without the race detector);
# the client's timing bound and the Envoy handler's allocation count
# without the race detector, which would slow the one and, dropping pooled
# buffers at random, skew the other. The Go client's and protocol modules, the chart module
# and the robustness suite run beside the main module's packages (their
# output after them). The robustness suite mostly waits out faults that
# outlast every timeout; its nodes keep their data in /dev/shm (see
# robust/README.md) and it runs at a raised CPU priority where the user
# may raise it (root), so that the compiler beside it does not starve a
# follower of the cluster under test. The latency-measuring tests (the
# client's timing bound, the hostile-client suite) run last, alone.
# SLUICE_HOSTILE_FULL=1 runs the hostile suite at full size.
ROBUST_NICE = $(shell nice -n -10 true 2>/dev/null && echo nice -n -10)

test: vet
	@unformatted=$$(gofmt -l .); if [ -n "$$unformatted" ]; then echo "gofmt needed:"; echo "$$unformatted"; exit 1; fi
	@logs=$$(mktemp -d); pids=""; \
	trap 'kill $$pids 2>/dev/null; rm -rf $$logs' INT TERM; \
	echo "beside the packages below (output after them): the robustness suite (-race); the Go client's module clients/go (-race); protocol (-race); deploy/charttest"; \
	$(ROBUST_NICE) $(GO) test -race -count=1 -timeout 30m ./robust >$$logs/robust 2>&1 & pids="$$pids $$!"; \
	(cd clients/go && $(GO) test -race -count=1 -timeout 10m ./...) >$$logs/client 2>&1 & pids="$$pids $$!"; \
	(cd protocol && $(GO) test -race -count=1 -timeout 10m ./...) >$$logs/protocol 2>&1 & pids="$$pids $$!"; \
	(cd deploy/charttest && $(GO) test -count=1 -timeout 10m ./...) >$$logs/charttest 2>&1 & pids="$$pids $$!"; \
	$(GO) test -race -count=1 -timeout 30m $$($(GO) list $(PKGS) | grep -v -e /hostile$$ -e /robust$$); rc=$$?; \
	for p in $$pids; do wait $$p || rc=1; done; \
	for f in robust client protocol charttest; do echo "== $$f"; cat $$logs/$$f; done; rm -rf $$logs; \
	exit $$rc
	$(GO) test -count=1 -run '^TestFailurePolicyWithoutSluice$$' ./e2e
	$(GO) test -count=1 -run '^TestShouldRateLimitAllocations$$' ./envoyrls
	$(GO) test -count=1 -timeout 30m ./hostile

# The console examples of README.md and docs/ run against the real binary
# (also part of make test); prints how many ran and which are marked not to.
test-docs:
	@out=$$(mktemp); $(GO) test -count=1 -run '^TestDocs$$' -v ./e2e/ >$$out 2>&1; status=$$?; \
	grep -Ev '^[[:space:]]+time=|^=== ' $$out; rm -f $$out; exit $$status

test-short:
	$(GO) test -short -count=1 $(PKGS)
	cd clients/go && $(GO) test -short -count=1 ./...
	cd protocol && $(GO) test -short -count=1 ./...
	cd deploy/charttest && $(GO) test -short -count=1 ./...

vet:
	$(GO) vet $(PKGS)
	cd clients/go && $(GO) vet ./...
	cd protocol && $(GO) vet ./...
	cd deploy/charttest && $(GO) vet ./...

fmt:
	gofmt -w .

# The robustness suite at length: random writes and reads through every
# node while nodes are killed, stopped and cut off; see robust/README.md.
chaos:
	SLUICE_CHAOS_DURATION=3m $(GO) test -race=false -count=1 -run TestRobustness -v -timeout 20m ./robust/

# A short smoke benchmark: one sluice node on free loopback ports, 20000
# inline RL.ACQUIREs from the bench tool (go run ./bench), its report.
bench:
	bash bench/smoke.sh

# sluice against Redis INCR and a Redis Lua token bucket, measured with
# redis-benchmark and the bench tool; ROUNDS, N and SLUICE_GOMAXPROCS tune it.
bench-compare:
	bash bench/compare.sh

# One pinned core of sluice (inline and under an enforcing parent) beside
# one of Redis INCR, five alternating rounds; ROUNDS tunes it.
bench-onecore:
	bash bench/onecore.sh

# How throughput scales with cores: the parallel go benchmarks at -cpu
# 1,2,4,8,16 and one node against Redis (docs/benchmarks.md); see the
# script's header to build a bundle for another machine.
bench-scaling:
	bash bench/scaling.sh

# Envoy's ShouldRateLimit over gRPC beside RL.ACQUIRE over RESP on one
# node; ROUNDS, N and C tune it (docs/benchmarks.md).
bench-envoy:
	bash bench/envoy.sh

# sluice run as envoyproxy/ratelimit beside envoyproxy/ratelimit with Redis:
# PEER_SRC=/path/to/a/checkout/of/envoyproxy/ratelimit (docs/benchmarks.md).
bench-peer:
	bash bench/peer.sh

# How closely 3 nodes hold a limit spread over them, every scenario for
# ACCURACY_D each (default 10s); see docs/accuracy.md.
ACCURACY_D ?= 10s
bench-accuracy:
	$(GO) run ./bench/accuracy -d $(ACCURACY_D)

# The rate-limit libraries' calls (redis_rate, rate-limiter-flexible,
# rate-limit-redis, Python limits) through sluice beside Redis, and their
# recognised scripts on one core; needs SLUICE_NODE_MODULES (docs/benchmarks.md).
bench-libraries:
	bash bench/libraries.sh

# Bytes per live bucket at 1,000,000 buckets, sluice beside Redis + Lua.
bench-memory:
	bash bench/memory.sh

# The scratch image from a static binary built here (needs a Docker engine,
# no registry): tags sluice:local, which docker-compose.yml runs with
# `docker compose up -d --no-build`. IMAGE names another tag.
IMAGE ?= sluice:local
image:
	@ctx=$$(mktemp -d); trap 'rm -rf $$ctx' EXIT; \
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "-s -w" -o $$ctx/sluice ./cmd/sluice && \
	mkdir -p $$ctx/bin $$ctx/data && ln -s /usr/local/bin/sluice $$ctx/bin/ratelimit && \
	DOCKER_BUILDKIT=0 docker build -q -f deploy/Dockerfile.scratch -t $(IMAGE) $$ctx

# Every artifact of a release into DIST (default dist/, git-ignored), with
# no registry: static binaries for linux/amd64, linux/arm64 and
# darwin/arm64 with their `go version -m` lists, the scratch image as a
# docker-load tarball tagged as the Helm chart's default image, the chart
# (helm package), the Python wheel and sdist, the npm tarball, SHA256SUMS.
# Needs a Docker engine; docs/releasing.md says how a release is published.
.PHONY: release
release:
	DIST=$(or $(DIST),dist) GO=$(GO) bash scripts/release.sh

# The container image (needs a Docker engine and a registry for its Go and
# distroless base images): docker compose up -d then starts a 3-node
# cluster from docker-compose.yml.
docker:
	docker build --build-arg VERSION=$$(git describe --tags --always 2>/dev/null || echo dev) -t sluice:local .

# Every fuzz target for FUZZTIME each (default 30s).
FUZZTIME ?= 30s
fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzCommands$$' -fuzztime $(FUZZTIME) ./commands
	$(GO) test -run '^$$' -fuzz '^FuzzParseWindow$$' -fuzztime $(FUZZTIME) ./commands
	$(GO) test -run '^$$' -fuzz '^FuzzParseCommand$$' -fuzztime $(FUZZTIME) ./server
	$(GO) test -run '^$$' -fuzz '^FuzzConnectionLoop$$' -fuzztime $(FUZZTIME) ./server
	$(GO) test -run '^$$' -fuzz '^FuzzFSMApply$$' -fuzztime $(FUZZTIME) ./raftfsm
	$(GO) test -run '^$$' -fuzz '^FuzzBudgetSetJSON$$' -fuzztime $(FUZZTIME) ./raftfsm
	$(GO) test -run '^$$' -fuzz '^FuzzReplyReader$$' -fuzztime $(FUZZTIME) ./bench

clean:
	rm -rf bin sluice-data
