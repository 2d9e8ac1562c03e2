#!/usr/bin/env bash
# make demo: start the local control plane (etcd, kube-apiserver, kcm,
# scheduler, kwok, the real OLM, PostgreSQL, the real Kuadrant, Authorino and Limitador
# operators and the Authorino server), the Vault-API test server, the simulated operators
# and the data-path stand-in (maas-api, the gateway's token limits, the model; every auth
# decision is the real Authorino's, from the AuthConfigs in the cluster);
# run `maasctl install` with the embedded default inventory, prove the endpoint with
# `maasctl verify --endpoint` (API key minted, /v1/models, a chat completion, 401 without a
# key, 429 over quota), run the install again (it must change nothing); then stop everything.
#
# KEEP=1 (make demo-keep) leaves it all running after a passed demo, for trying maasctl by
# hand: it writes STATE/env.sh (KUBECONFIG, VAULT_ADDR, VAULT_TOKEN, MAAS_ENDPOINT; mode 0600,
# never printed) and STATE/demo.pids; `e2e/demo.sh stop` (make demo-stop) stops it all.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-$PWD/bin}
STATE=${STATE:-$PWD/.state/demo}
KEEP=${KEEP:-0}

if [ "${1:-}" = stop ]; then
  if [ -s "$STATE/demo.pids" ]; then
    # Only a process that still runs one of the demo's binaries: a pid
    # may have been reused since (a reboot, a long pause).
    for p in $(cat "$STATE/demo.pids"); do
      if grep -qaF "$BIN/" "/proc/$p/cmdline" 2>/dev/null; then kill "$p" 2>/dev/null || true; fi
    done
    rm -f "$STATE/demo.pids"
  fi
  "$BIN/testenv-ctl" down --state "$STATE" >/dev/null 2>&1 || true
  echo "demo stopped (logs kept in $STATE)"
  exit 0
fi
# Simulated operator delays (scaled-down real ones); override with SIM_DELAYS.
# OLM is real (testenv runs its olm and catalog operators), so it has no delay here.
SIM_DELAYS=${SIM_DELAYS:---delay cnpg=500ms --delay dsc=800ms}
# The data-path stand-in asks the real Authorino for every auth decision:
# it checks Authorino's listener certificate against the simulated service
# CA and serves maas-api's internal endpoints behind the operators' Service
# proxy.
# The published service CA bundle also holds the control plane's ServiceCA
# (written when its operators start, below), which signs maas-api's
# certificate: Authorino trusts it only as maasctl mounts that bundle.
sim_flags=(--service-ca-file "$STATE/sim-service-ca.crt" --service-ca-bundle-file "$STATE/service-ca.crt")
plane_flags=(--testenv-state "$STATE" --service-ca-file "$STATE/sim-service-ca.crt")

pids=()
cleanup() {
  rc=$?
  if [ $rc -eq 0 ] && [ "$KEEP" = 1 ]; then
    echo "${pids[*]}" >"$STATE/demo.pids"
    (umask 077; {
      echo "export KUBECONFIG='$KUBECONFIG'"
      echo "export VAULT_ADDR='$VAULT_ADDR'"
      echo "export VAULT_TOKEN='$VAULT_TOKEN'"
      echo "export MAAS_ENDPOINT='$ENDPOINT'"
    } >"$STATE/env.sh")
    echo "demo passed; left running for you (KEEP=1):"
    echo "  source $STATE/env.sh    # KUBECONFIG, VAULT_ADDR, VAULT_TOKEN, MAAS_ENDPOINT"
    echo "  bin/maasctl status; bin/maasctl verify --endpoint \$MAAS_ENDPOINT --ca-file $STATE/endpoint-ca.crt; bin/maasctl doctor --live-only"
    echo "  make demo-stop           # stops it all"
    exit 0
  fi
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  "$BIN/testenv-ctl" down --state "$STATE" >/dev/null 2>&1 || true
  if [ $rc -ne 0 ]; then
    echo "demo failed (exit $rc); logs are in $STATE/*.log" >&2
  else
    echo "demo passed: install, verify --endpoint and a no-op re-run; everything it started is stopped (logs in $STATE)"
  fi
  exit $rc
}
trap cleanup EXIT

rm -rf "$STATE"; mkdir -p "$STATE"
echo "== starting the local control plane (logs in $STATE)"
# --model-server: the llama.cpp server the install publishes runs already
# (the fixture's Service llm-coding-assistant/llama-coder gets a ready endpoint).
"$BIN/testenv-ctl" up --state "$STATE" --model-server --real-kuadrant >/dev/null
export KUBECONFIG=$STATE/kubeconfig
# They follow the pods of the RHCL CSV for as long as this script runs.
"$BIN/testenv-ctl" operators --state "$STATE" 2>"$STATE/operators.log" &
pids+=($!)
sleep 1
if ! kill -0 "$!" 2>/dev/null; then
  echo "testenv-ctl operators exited at once:" >&2
  cat "$STATE/operators.log" >&2
  exit 1
fi

for _ in $(seq 1 100); do [ -s "$STATE/service-ca.crt" ] && break; sleep 0.1; done
echo "== starting the Vault-API test server and the simulated operators"
VAULT_TOKEN=$(openssl rand -hex 16)
export VAULT_TOKEN
VAULT_TEST_SERVER_TOKEN=$VAULT_TOKEN "$BIN/vault-test-server" --listen 127.0.0.1:0 --addr-file "$STATE/vault.addr" >"$STATE/vault.log" 2>&1 &
pids+=($!)
# shellcheck disable=SC2086
"$BIN/maasctl-sim" --kubeconfig "$KUBECONFIG" --postgres-admin "$(cat "$STATE/postgres-admin.conn")" "${sim_flags[@]}" $SIM_DELAYS >"$STATE/sim.log" 2>&1 &
pids+=($!)
for _ in $(seq 1 100); do [ -s "$STATE/vault.addr" ] && break; sleep 0.1; done
VAULT_ADDR=$(cat "$STATE/vault.addr")
export VAULT_ADDR

echo "== maasctl install (first run)"
"$BIN/maasctl" install -o plain --log-file "$STATE/maasctl.log"

echo
echo "== starting the data-path stand-in (maas-api, gateway auth and limits, the model) on 127.0.0.1"
"$BIN/maasctl-dataplane" --kubeconfig "$KUBECONFIG" --postgres-admin "$(cat "$STATE/postgres-admin.conn")" \
  --url-file "$STATE/endpoint.url" --ca-file "$STATE/endpoint-ca.crt" "${plane_flags[@]}" >"$STATE/dataplane.log" 2>&1 &
pids+=($!)
for _ in $(seq 1 100); do [ -s "$STATE/endpoint.url" ] && break; sleep 0.1; done
ENDPOINT=$(cat "$STATE/endpoint.url")

echo "== maasctl verify --endpoint $ENDPOINT (key, models, chat, 401, 429)"
"$BIN/maasctl" verify --endpoint "$ENDPOINT" --ca-file "$STATE/endpoint-ca.crt" --probe-quota | tee "$STATE/verify.txt"
# The refusal is Authorino's: its reason header, which the stand-in's own
# 401 never carries.
reason=$(curl -s -o /dev/null -D - --cacert "$STATE/endpoint-ca.crt" "$ENDPOINT/v1/models" | tr -d '\r' | sed -n 's/^[Xx]-[Ee]xt-[Aa]uth-[Rr]eason: //p')
if [ "$reason" != "Authentication required" ]; then
  echo "GET /v1/models without a key was not refused by Authorino (reason header: '$reason')" >&2
  exit 1
fi
echo "GET /v1/models without a key: 401 from Authorino ($reason)"

echo
echo "== maasctl install (second run: every step must be unchanged)"
start=$(date +%s%N)
"$BIN/maasctl" install -o plain --log-file "$STATE/maasctl.log" | tee "$STATE/second-run.txt"
ms=$(( ($(date +%s%N) - start) / 1000000 ))
if ! grep -Eq '^maasctl: 0 done, [0-9]+ unchanged, 0 failed, 0 not run .*[^0-9]0 writes' "$STATE/second-run.txt"; then
  echo "second run was not a no-op" >&2
  exit 1
fi
echo "second run: ${ms} ms wall time, nothing written"
