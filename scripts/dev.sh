#!/usr/bin/env bash
# Set everything up on a fresh Debian machine, then run the demo or the tests.
#   bash scripts/dev.sh demo     # set up, then `sparkflux demo`
#   bash scripts/dev.sh test     # set up, then the whole test suite
# Installs a Java runtime (and iptables, chromium) through apt-get if missing, creates .venv,
# installs the package with its pinned dependencies. Safe to run again: each step is skipped when done.
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
command -v java >/dev/null 2>&1 || need_apt+=(openjdk-17-jre-headless)
# iptables: the tests cut a site's links on the loopback interface (--cut, --isolate)
command -v iptables >/dev/null 2>&1 || need_apt+=(iptables)
# chromium: a test loads the live dashboard in a headless browser (and
# scripts/dashboard_screenshot.py draws it)
command -v chromium >/dev/null 2>&1 || need_apt+=(chromium)
PY=${PYTHON:-$(command -v python3.11 || command -v python3)}
"$PY" -c 'import venv, ensurepip' >/dev/null 2>&1 || need_apt+=(python3-venv)
if ((${#need_apt[@]})); then
  echo ">> installing ${need_apt[*]} with apt-get"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need_apt[@]}" >/dev/null
fi

if [[ ! -x .venv/bin/python ]]; then
  echo ">> creating .venv with $PY"
  "$PY" -m venv .venv
fi
stamp=.venv/.sparkflux-installed
if [[ ! -f $stamp || pyproject.toml -nt $stamp ]]; then
  echo ">> installing sparkflux and its pinned dependencies"
  # (a package index configured with local mirrors that lack a package warns once per
  # package: noise, filtered; pip's own failure still stops the script)
  .venv/bin/python -m pip install -q --disable-pip-version-check -e ".[dev]" 2>&1 \
    | { grep -v "^WARNING: Location '.*' is ignored" || true; }
  touch "$stamp"
fi

case "${1:-test}" in
  demo) shift || true; exec .venv/bin/sparkflux demo "$@" ;;
  test)
    shift || true
    if (($#)); then exec .venv/bin/python -m pytest -q "$@"; fi
    # Lint first (seconds): the rules in pyproject.toml, every noqa matching a selected rule.
    .venv/bin/ruff check sparkflux tests bench examples scripts
    # Types (seconds): mypy, strict on model/, protocol/ and control/ (pyproject.toml).
    .venv/bin/mypy sparkflux
    # Two phases: the simulator and unit tests on two workers (a worker that runs out takes
    # tests queued for the other), then the Spark tests apart from them, one at a time: a
    # test's sites, standbys and catch-ups have the machine's cores to themselves, as their
    # timeouts assume (docs/testing.md).
    .venv/bin/python -m pytest -q -n 2 --dist worksteal -m "not spark"
    exec .venv/bin/python -m pytest -q -m spark ;;
  setup) ;;
  *) echo "usage: scripts/dev.sh demo|test|setup" >&2; exit 2 ;;
esac
