#!/bin/sh
# npm-setup.sh DIR: the test clients of tests/http (the openai SDK,
# puppeteer-core, Qwen Code) from the npm registry into DIR (outside the
# tree or in the ignored build folder), as package-lock.json pins them,
# plus the test scripts beside them (Node resolves imports from the
# script's folder). Nothing is downloaded past the registry: puppeteer-core
# fetches no browser (Debian's chromium runs the page test).
# `npm install` with the lock, not `npm ci`: Qwen Code's optional
# @teddyzhu/clipboard names platform packages the registry does not have,
# which npm ci takes for a lock out of sync (npm install skips them, and
# installs the locked versions and hashes all the same).
set -eu
DIR=$1
SRC=$(cd "$(dirname "$0")" && pwd)
command -v npm >/dev/null || { echo "npm-setup: npm missing (make deps installs it)" >&2; exit 1; }
mkdir -p "$DIR"
if ! [ -f "$DIR/.installed" ] || ! cmp -s "$SRC/package-lock.json" "$DIR/.installed"; then
    cp "$SRC/package.json" "$SRC/package-lock.json" "$DIR/"
    rm -f "$DIR/.installed"
    (cd "$DIR" && PUPPETEER_SKIP_DOWNLOAD=1 npm install --no-save --no-audit --no-fund --ignore-scripts \
        --loglevel=error) >&2
    cp "$SRC/package-lock.json" "$DIR/.installed"    # the lock it installed
fi
cp "$SRC"/*.mjs "$DIR/"
