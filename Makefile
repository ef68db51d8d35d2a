# nlx: build, test and measure. CI runs `make test` (see .ci/run).

GO ?= go
BIN ?= bin

.PHONY: all build arm64 test check fuzz bench clean providers vm

all: build

# -buildvcs=auto: the binary names the commit it was built from (nlx
# version), also where GOFLAGS turns stamping off. CGO_ENABLED=0: static,
# as the Pi's: an inference launch runs this nlx as its bridge inside the
# sandbox, an image root included, which has no host libc.
build:
	CGO_ENABLED=0 $(GO) build -buildvcs=auto -o $(BIN)/nlx ./cmd/nlx

# The Raspberry Pi binary: pure Go, no cgo.
arm64:
	CGO_ENABLED=0 GOOS=linux GOARCH=arm64 $(GO) build -buildvcs=auto -trimpath -o $(BIN)/nlx-linux-arm64 ./cmd/nlx

# The real provider programs the tests drive (Codex, Claude Code), from npm,
# pinned by version and by the lockfile's integrity hashes, into the
# git-ignored .providers/ (npm ci refuses a package whose hash differs).
# Tests find them there, or on PATH.
providers:
	mkdir -p .providers
	cp provider/npm/package.json provider/npm/package-lock.json .providers/
	cd .providers && npm ci --no-audit --no-fund --loglevel=error

# What the VM tests boot (internal/vmtest): Debian's cloud kernels for amd64
# and arm64, pinned by exact package version and taken out of their
# packages without installing them, and the arm64 guest's busybox and
# bubblewrap from Debian's arm64 packages (a private apt state: the host's
# dpkg never hears of arm64), into the git-ignored .vm/.
vm:
	sh internal/vmtest/fetch.sh .vm

# Every test, with the race detector; fuzz targets run their seed corpora.
test:
	$(GO) vet ./...
	$(GO) test -race -count=1 ./...

# Formatting (Go, and every shipped .cue file as cue fmt formats it), vet
# and the arm64 cross-compile, as the pre-merge check does.
check:
	@test -z "$$(gofmt -l .)" || (gofmt -l . && false)
	$(GO) test -count=1 -run '^TestCUEFormatted$$' ./schema
	$(GO) vet ./...
	CGO_ENABLED=0 GOOS=linux GOARCH=arm64 $(GO) build -o /dev/null ./cmd/nlx

# A short run of every fuzz target.
fuzz:
	$(GO) test ./schema -run '^$$' -fuzz FuzzLoad -fuzztime 30s
	$(GO) test ./plan -run '^$$' -fuzz FuzzRead -fuzztime 30s
	$(GO) test ./plan -run '^$$' -fuzz FuzzAppendString -fuzztime 30s
	$(GO) test ./reconcile -run '^$$' -fuzz FuzzLeaves -fuzztime 30s

# Benchmarks next to the code, then whole commands against `cue export`,
# with ratios to the peers measured in the same run.
bench:
	$(GO) run ./bench

clean:
	rm -rf $(BIN) .bench .providers .vm
