#!/usr/bin/env bash
# Install the offline Terraform checks' tools into <repo>/.tools (gitignored):
#   .tools/checkov/          a venv of its own for checkov (it ships a conflicting `hcl2` module)
#   .tools/npm/              @cdktf/hcl-tools, HashiCorp's HCL formatter compiled to WebAssembly
# Needs only the PyPI and npm registries, never a Terraform registry or binary. Idempotent:
# a second run only checks the pinned versions and exits.
set -euo pipefail

CHECKOV_VERSION="${CHECKOV_VERSION:-3.3.30}"
HCL_TOOLS_VERSION="${HCL_TOOLS_VERSION:-0.21.0}"

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../../.." && pwd)"
tools="${ANIMFLEET_TOOLS_DIR:-$repo/.tools}"
python="${PYTHON:-python3}"

log() { printf 'install.sh: %s\n' "$*" >&2; }

install_checkov() {
  local venv="$tools/checkov"
  local stamp="$venv/.installed-$CHECKOV_VERSION"
  if [[ -f "$stamp" && -x "$venv/bin/checkov" ]]; then
    return 0
  fi
  log "installing checkov $CHECKOV_VERSION into $venv"
  rm -rf "$venv"
  "$python" -m venv "$venv"
  if ! "$venv/bin/python" -m pip install --disable-pip-version-check \
    "checkov==$CHECKOV_VERSION" >"$tools/checkov-install.log" 2>&1; then
    tail -n 40 "$tools/checkov-install.log" >&2
    log "pip could not install checkov (is the PyPI registry reachable?)"
    exit 1
  fi
  "$venv/bin/checkov" --version >/dev/null
  touch "$stamp"
}

install_hcl_tools() {
  local prefix="$tools/npm"
  local pkg="$prefix/node_modules/@cdktf/hcl-tools/package.json"
  if [[ -f "$pkg" ]] && grep -q "\"version\": \"$HCL_TOOLS_VERSION\"" "$pkg"; then
    return 0
  fi
  command -v npm >/dev/null || { log "npm is required (Node.js >= 18)"; exit 1; }
  log "installing @cdktf/hcl-tools $HCL_TOOLS_VERSION into $prefix"
  mkdir -p "$prefix"
  if ! npm install --prefix "$prefix" --no-audit --no-fund --no-save --loglevel=error \
    "@cdktf/hcl-tools@$HCL_TOOLS_VERSION" >"$tools/hcl-tools-install.log" 2>&1; then
    tail -n 40 "$tools/hcl-tools-install.log" >&2
    log "npm could not install @cdktf/hcl-tools (is the npm registry reachable?)"
    exit 1
  fi
}

mkdir -p "$tools"
install_checkov
install_hcl_tools
printf 'checkov=%s\nhcl_tools=%s\n' "$tools/checkov/bin/checkov" \
  "$tools/npm/node_modules/@cdktf/hcl-tools"
