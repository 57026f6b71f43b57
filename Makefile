# sluice — make run starts a server, make test runs every test.
GO      ?= go
BIN     ?= bin/sluice
PKGS    ?= ./...

.PHONY: all build run test test-short race vet fmt bench bench-compare bench-memory fuzz docker clean

all: build

build:
	$(GO) build -o $(BIN) ./cmd/sluice

# A complete single-node server: RESP on 127.0.0.1:6380, HTTP on :9380.
run: build
	./$(BIN) --data-dir ./sluice-data

# Every test with the race detector, plus gofmt and go vet.
test: vet
	@unformatted=$$(gofmt -l .); if [ -n "$$unformatted" ]; then echo "gofmt needed:"; echo "$$unformatted"; exit 1; fi
	$(GO) test -race -count=1 -timeout 30m $(PKGS)

test-short:
	$(GO) test -short -count=1 $(PKGS)

vet:
	$(GO) vet $(PKGS)

fmt:
	gofmt -w .

# A short smoke benchmark: one sluice node on free loopback ports, 20000
# inline RL.ACQUIREs from the bench tool (go run ./bench), its report.
bench:
	bash bench/smoke.sh

# sluice against Redis INCR and a Redis Lua token bucket, measured with
# redis-benchmark and the bench tool; ROUNDS, N and SLUICE_GOMAXPROCS tune it.
bench-compare:
	bash bench/compare.sh

# Bytes per live bucket at 1,000,000 buckets, sluice beside Redis + Lua.
bench-memory:
	bash bench/memory.sh

clean:
	rm -rf bin sluice-data
