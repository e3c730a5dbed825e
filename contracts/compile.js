// Compile src/*.sol offline with solc-js (the compiler as wasm) into
// ../pipeline/settlement/artifacts/<Contract>.json
// (ABI and bytecode). `node compile.js --check` compiles again and fails on any difference from
// the committed files, so what is deployed is what the sources say.
"use strict";
const fs = require("fs");
const path = require("path");
const solc = require("solc");

const root = __dirname;
const srcDir = path.join(root, "src");
// Beside the Python that deploys them, so the package carries them.
const buildDir = path.join(root, "..", "pipeline", "settlement", "artifacts");
const check = process.argv.includes("--check");

function findImport(importPath) {
  const candidate = path.join(root, "node_modules", importPath);
  if (fs.existsSync(candidate)) return { contents: fs.readFileSync(candidate, "utf8") };
  return { error: `not found: ${importPath}` };
}

const sources = {};
for (const name of fs.readdirSync(srcDir).sort()) {
  if (name.endsWith(".sol")) sources[`src/${name}`] = { content: fs.readFileSync(path.join(srcDir, name), "utf8") };
}
const input = {
  language: "Solidity",
  sources,
  settings: {
    evmVersion: "cancun",
    optimizer: { enabled: true, runs: 200 },
    metadata: { bytecodeHash: "none" },
    outputSelection: { "*": { "*": ["abi", "evm.bytecode.object"] } },
  },
};
const output = JSON.parse(solc.compile(JSON.stringify(input), { import: findImport }));
const errors = (output.errors || []).filter((e) => e.severity === "error");
for (const e of output.errors || []) console.error(e.formattedMessage);
if (errors.length) process.exit(1);

let differences = 0;
if (!check) fs.mkdirSync(buildDir, { recursive: true });
for (const file of Object.keys(sources)) {
  for (const [name, contract] of Object.entries(output.contracts[file])) {
    const artifact = {
      contractName: name,
      compiler: `solc ${solc.version()}`,
      evmVersion: input.settings.evmVersion,
      abi: contract.abi,
      bytecode: "0x" + contract.evm.bytecode.object,
    };
    const text = JSON.stringify(artifact, null, 2) + "\n";
    const target = path.join(buildDir, `${name}.json`);
    if (check) {
      const committed = fs.existsSync(target) ? fs.readFileSync(target, "utf8") : "";
      if (committed !== text) {
        console.error(`pipeline/settlement/artifacts/${name}.json differs from what contracts/src compiles to`);
        differences += 1;
      }
    } else {
      fs.writeFileSync(target, text);
      console.log(`pipeline/settlement/artifacts/${name}.json`);
    }
  }
}
process.exit(differences ? 1 : 0);
