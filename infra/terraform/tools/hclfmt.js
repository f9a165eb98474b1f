#!/usr/bin/env node
// Canonical HCL formatting without a Terraform binary: @cdktf/hcl-tools is hclwrite.Format (what
// `terraform fmt` runs) compiled to WebAssembly. Install it with tools/install.sh.
//
//   node hclfmt.js --check DIR_OR_FILE...   list files that are not canonical; exit 1 if any
//   node hclfmt.js --write DIR_OR_FILE...   rewrite them in place
"use strict";

const fs = require("fs");
const path = require("path");

const repo = path.resolve(__dirname, "..", "..", "..");
const tools = process.env.ANIMFLEET_TOOLS_DIR || path.join(repo, ".tools");
const HCL = /\.(tf|tfvars)(\.example)?$/;

function hclFiles(target) {
  const stat = fs.statSync(target);
  if (stat.isFile()) return [target];
  return fs
    .readdirSync(target, { withFileTypes: true })
    .filter((entry) => !entry.name.startsWith("."))
    .flatMap((entry) => {
      const full = path.join(target, entry.name);
      if (entry.isDirectory()) return hclFiles(full);
      return HCL.test(entry.name) ? [full] : [];
    });
}

async function main() {
  const [mode, ...targets] = process.argv.slice(2);
  if (!["--check", "--write"].includes(mode) || targets.length === 0) {
    console.error("usage: hclfmt.js --check|--write DIR_OR_FILE...");
    process.exit(2);
  }
  const { format } = require(path.join(tools, "npm", "node_modules", "@cdktf", "hcl-tools"));
  let unformatted = 0;
  for (const file of targets.flatMap(hclFiles).sort()) {
    const source = fs.readFileSync(file, "utf8");
    const canonical = await format(source);
    if (canonical === source) continue;
    unformatted += 1;
    if (mode === "--write") fs.writeFileSync(file, canonical);
    console.log(file);
  }
  process.exit(mode === "--check" && unformatted > 0 ? 1 : 0);
}

main().catch((error) => {
  console.error(`hclfmt.js: ${error.stack || error}`);
  process.exit(2);
});
