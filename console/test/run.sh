#!/usr/bin/env bash
# console/test/run.sh: the web console's end-to-end test. Installs what is
# missing (Debian's chromium, the console's npm packages with playwright-core),
# then runs console/test/console_test.js with node's test runner against the
# database of the PG* environment (a superuser's connection; sbqueue installed).
# Screenshots go to SBQ_SCREENSHOT_DIR (default console/test/screenshots/).
set -euo pipefail
cd "$(dirname "$0")/.."

if [ ! -x /usr/bin/chromium ]; then
    echo "console test: installing Debian's chromium"
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y -qq chromium >/dev/null 2>&1 ||
        { apt-get update -qq && apt-get install -y -qq chromium >/dev/null; }
fi
if [ ! -d node_modules/pg ] || [ ! -d node_modules/playwright-core ]; then
    echo "console test: npm install"
    npm install --no-audit --no-fund --silent
fi

exec node --test test/console_test.js
