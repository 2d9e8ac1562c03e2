# maasctl — see README.md. All build outputs go to bin/ (git-ignored).
SHELL        := /bin/bash
BIN          := $(CURDIR)/bin
TESTENV      := $(BIN)/testenv
K8S_VERSION  := v1.37.2
K8S_MINOR    := 37
KWOK_VERSION := v0.8.0
GOBUILD      := go build -trimpath
VERSION      ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
K8S_VERSION_PKGS := k8s.io/component-base/version k8s.io/client-go/pkg/version
K8S_LDFLAGS  := -s -w $(foreach p,$(K8S_VERSION_PKGS),-X $(p).gitVersion=$(K8S_VERSION) -X $(p).gitMajor=1 -X $(p).gitMinor=$(K8S_MINOR) -X $(p).gitTreeState=clean)
K8S_BINS     := $(TESTENV)/kube-apiserver $(TESTENV)/kube-controller-manager $(TESTENV)/kube-scheduler
TOOLS        := $(BIN)/maasctl $(BIN)/maasctl-sim $(BIN)/vault-test-server $(BIN)/testenv-ctl $(BIN)/maasctl-dataplane
TOOLS_MODS   := etcd k8s olm opm kuadrant limitador authorino cnpg
GO_SOURCES   := $(shell find . -name '*.go' -not -path './bin/*' $(foreach m,$(TOOLS_MODS),-not -path './e2e/testenv/$(m)/*')) go.mod go.sum $(shell find assets/manifests e2e/testenv/fixture -type f 2>/dev/null)

.PHONY: all build install testenv demo demo-keep demo-stop test test-full unit bench vet clean

all: build

PREFIX       ?= /usr/local

## install: maasctl into $(PREFIX)/bin, with the kubectl and oc plugin names beside it
## (kubectl-maas, oc-maas: "kubectl maas install" and "oc maas status" then run it)
install: $(BIN)/maasctl
	install -d $(DESTDIR)$(PREFIX)/bin
	install -m 0755 $(BIN)/maasctl $(DESTDIR)$(PREFIX)/bin/maasctl
	ln -sf maasctl $(DESTDIR)$(PREFIX)/bin/kubectl-maas
	ln -sf maasctl $(DESTDIR)$(PREFIX)/bin/oc-maas

## build: the maasctl binary and the test tools (simulators, Vault-API test server, control plane launcher)
build: $(TOOLS)

$(BIN)/maasctl: $(GO_SOURCES)
	$(GOBUILD) -ldflags '-X main.version=$(VERSION)' -o $@ ./cmd/maasctl
$(BIN)/maasctl-sim: $(GO_SOURCES)
	$(GOBUILD) -o $@ ./e2e/cmd/maasctl-sim
$(BIN)/vault-test-server: $(GO_SOURCES)
	$(GOBUILD) -o $@ ./e2e/cmd/vault-test-server
$(BIN)/testenv-ctl: $(GO_SOURCES)
	$(GOBUILD) -o $@ ./e2e/cmd/testenv
$(BIN)/maasctl-dataplane: $(GO_SOURCES)
	$(GOBUILD) -o $@ ./e2e/cmd/maasctl-dataplane

# Real upstream operators (issue 12): each tools module under e2e/testenv pins one exact release;
# a binary is rebuilt only when its module's go.mod or go.sum changes.
OLM_BINS      := $(TESTENV)/olm $(TESTENV)/catalog
KUADRANT_BINS := $(TESTENV)/kuadrant-operator $(TESTENV)/authorino-operator
OPERATOR_BINS := $(OLM_BINS) $(TESTENV)/netns-run $(TESTENV)/opm $(KUADRANT_BINS) $(TESTENV)/limitador-operator $(TESTENV)/authorino $(TESTENV)/cnpg-manager

# The External Secrets Operator module, for its ExternalSecret CRD (render --secrets external-secrets
# is checked against it); downloaded into the module cache, nothing is built. Run outside any module.
ESO_VERSION := $(shell sed -n 's/^const ExternalSecretsVersion = "\(.*\)"/\1/p' e2e/testenv/olm.go)
ESO_STAMP   := $(TESTENV)/.external-secrets-$(ESO_VERSION)
$(ESO_STAMP):
	mkdir -p $(TESTENV)
	cd $(TESTENV) && GOFLAGS= go mod download github.com/external-secrets/external-secrets@$(ESO_VERSION)
	touch $@

## testenv: etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok, and the real operators
## (OLM, opm, Kuadrant, Authorino, CloudNativePG) built from Go modules (once; cached in bin/testenv);
## Debian's PostgreSQL server (initdb, pg_ctl, postgres), installed with apt-get when missing and run as root
testenv: $(TESTENV)/etcd $(K8S_BINS) $(TESTENV)/kwok $(OPERATOR_BINS) $(ESO_STAMP) postgresql


$(OLM_BINS) &: e2e/testenv/olm/go.mod e2e/testenv/olm/go.sum
	mkdir -p $(TESTENV)
	cd e2e/testenv/olm && $(GOBUILD) -tags=json1 -ldflags='-s -w' -o $(TESTENV)/ \
	  github.com/operator-framework/operator-lifecycle-manager/cmd/olm \
	  github.com/operator-framework/operator-lifecycle-manager/cmd/catalog
	touch $(OLM_BINS)

# netns-run: runs olm and catalog in network namespaces of their own (they hard-code :8080).
$(TESTENV)/netns-run: e2e/cmd/netns-run/main.go go.mod go.sum
	mkdir -p $(TESTENV)
	$(GOBUILD) -ldflags='-s -w' -o $@ ./e2e/cmd/netns-run

$(TESTENV)/opm: e2e/testenv/opm/go.mod e2e/testenv/opm/go.sum
	mkdir -p $(TESTENV)
	cd e2e/testenv/opm && $(GOBUILD) -tags=json1,containers_image_openpgp -ldflags='-s -w' -o $@ github.com/operator-framework/operator-registry/cmd/opm
	touch $@

$(KUADRANT_BINS) &: e2e/testenv/kuadrant/go.mod e2e/testenv/kuadrant/go.sum
	mkdir -p $(TESTENV)
	cd e2e/testenv/kuadrant && \
	  $(GOBUILD) -ldflags='-s -w' -o $(TESTENV)/kuadrant-operator github.com/kuadrant/kuadrant-operator/cmd && \
	  $(GOBUILD) -ldflags='-s -w' -o $(TESTENV)/authorino-operator github.com/kuadrant/authorino-operator
	touch $(KUADRANT_BINS)

# limitador-operator v0.15.0 (the version kuadrant-operator v1.5.2 pins) needs its own, older
# k8s.io/api (VolumeResourceRequirements): it does not build in kuadrant-operator's module graph.
$(TESTENV)/limitador-operator: e2e/testenv/limitador/go.mod e2e/testenv/limitador/go.sum
	mkdir -p $(TESTENV)
	cd e2e/testenv/limitador && $(GOBUILD) -ldflags='-s -w' -o $@ github.com/kuadrant/limitador-operator
	touch $@

$(TESTENV)/authorino: e2e/testenv/authorino/go.mod e2e/testenv/authorino/go.sum
	mkdir -p $(TESTENV)
	cd e2e/testenv/authorino && $(GOBUILD) -ldflags='-s -w' -o $@ github.com/kuadrant/authorino
	touch $@

$(TESTENV)/cnpg-manager: e2e/testenv/cnpg/go.mod e2e/testenv/cnpg/go.sum
	mkdir -p $(TESTENV)
	cd e2e/testenv/cnpg && $(GOBUILD) -ldflags='-s -w' -o $@ github.com/cloudnative-pg/cloudnative-pg/cmd/manager
	touch $@

.PHONY: postgresql
postgresql:
	@./e2e/testenv/postgres.sh

$(TESTENV)/etcd: e2e/testenv/etcd/go.mod e2e/testenv/etcd/go.sum e2e/testenv/etcd/main.go
	mkdir -p $(TESTENV)
	cd e2e/testenv/etcd && $(GOBUILD) -ldflags='-s -w' -o $@ .
	touch $@

$(K8S_BINS) &: e2e/testenv/k8s/go.mod e2e/testenv/k8s/go.sum
	mkdir -p $(TESTENV)
	cd e2e/testenv/k8s && $(GOBUILD) -ldflags='$(K8S_LDFLAGS)' -o $(TESTENV)/ \
	  k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager k8s.io/kubernetes/cmd/kube-scheduler
	touch $(K8S_BINS)

$(TESTENV)/kwok: Makefile
	mkdir -p $(TESTENV)
	GOBIN=$(TESTENV) go install -trimpath -ldflags='-s -w' sigs.k8s.io/kwok/cmd/kwok@$(KWOK_VERSION)
	touch $@

## demo: start the local control plane, simulated operators, Vault and the data-path stand-in; install;
## prove the endpoint (verify --endpoint: key, models, chat, 401, 429); install again (no change); stop all
demo: build testenv
	./e2e/demo.sh

## demo-keep: make demo, then leave everything running to try maasctl by hand (it prints how); demo-stop stops it
demo-keep: build testenv
	KEEP=1 ./e2e/demo.sh
demo-stop:
	./e2e/demo.sh stop

## test: unit, integration and end-to-end tests (builds what they need first); a few
## e2e tests and variants are left out for CI's time (README, "The full e2e run")
test: build testenv
	MAASCTL_REQUIRE_TESTENV=1 MAASCTL_BIN=$(BIN) go test -count=1 -parallel 3 -timeout 85m ./...

## test-full: make test with every e2e test and variant (MAASCTL_E2E_FULL=1); its e2e package alone needs over 80 minutes here
test-full: build testenv
	MAASCTL_E2E_FULL=1 MAASCTL_REQUIRE_TESTENV=1 MAASCTL_BIN=$(BIN) go test -count=1 -timeout 150m ./...

## unit: the pure packages only (no control plane)
unit:
	go test -count=1 ./inventory/ ./assets/ ./vault/ ./waiters/ ./steps/...

## bench: benchmarks against fresh local control planes with simulated operators (about 15 minutes):
## install ÷ critical path (parallel, with 10× longer delays, serial), detection latency, no-op re-run, Ansible, scale,
## migrate tiers at the same model counts, RSS.
## Prints a table and writes e2e/bench/results.json. Installs Debian's ansible and python3-kubernetes for the
## Ansible figures when missing (as root), or reports them skipped with the reason. BENCH_FLAGS adds flags
## (e.g. BENCH_FLAGS='-models 1,10,100 -figures install,serial').
bench: build testenv
	$(GOBUILD) -o $(BIN)/maasctl-bench ./e2e/bench/cmd/maasctl-bench
	$(BIN)/maasctl-bench -maasctl $(BIN)/maasctl -playbook e2e/bench/ansible/install.yaml -json e2e/bench/results.json $(BENCH_FLAGS)

vet:
	go vet ./...

clean:
	rm -rf $(BIN) .state
