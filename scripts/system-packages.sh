#!/usr/bin/env bash
# The Debian packages the tests start: Chromium (test/dashboard.test.ts drives it with
# playwright-core), nginx (test/proxy.ts: the load balancer in front of a fleet) and PostgreSQL
# (test/postgres.ts: a fleet's shared state). `npm test` runs this first, so that no test fails
# for a missing program. It installs the missing packages when this user may (root, or sudo
# without a password); otherwise it stops at once, naming the command that installs them.
set -euo pipefail

chromium=${AGL_CHROMIUM:-/usr/bin/chromium}
missing=()
if [ -z "${AGL_CHROMIUM:-}" ]; then
  [ -x "$chromium" ] || missing+=(chromium)
elif [ ! -x "$chromium" ]; then
  echo "system-packages: AGL_CHROMIUM=$chromium is not an executable; unset it to use Debian's chromium" >&2
  exit 1
fi
[ -x /usr/sbin/nginx ] || missing+=(nginx)
compgen -G '/usr/lib/postgresql/*/bin/postgres' >/dev/null || missing+=(postgresql)
((${#missing[@]})) || exit 0

if ! command -v apt-get >/dev/null; then
  echo "system-packages: the tests need ${missing[*]} (Debian's package names), and there is no apt-get here" >&2
  exit 1
fi
if [ "$(id -u)" = 0 ]; then
  sudo=()
elif command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
  sudo=(sudo -n)
else
  echo "system-packages: the tests need the Debian packages ${missing[*]}; install them with" >&2
  echo "  sudo apt-get update && sudo apt-get install -y ${missing[*]}" >&2
  exit 1
fi

echo "system-packages: installing ${missing[*]} from Debian for the tests"
"${sudo[@]}" apt-get update -q
"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}"
