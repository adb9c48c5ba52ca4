#!/usr/bin/env bash
# PostgreSQL stopped under two `agl serve --state` servers and their runners, and started again
# after --outage-seconds (default 30): prints what the servers, runners and state did (JSON).
# The test suite runs a few seconds of the same (test/store/postgres-outage.test.ts).
set -euo pipefail
cd "$(dirname "$0")/.."
npm run build >/dev/null
# npx puts the project's Node first on PATH, as npm run does.
exec npx node dist/bench/postgres-outage.js "$@"
