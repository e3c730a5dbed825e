// The web form's verdicts under Node, for tests/models/test_schema_suite.py: loads the
// vendored Ajv bundle and api/static/rowcheck.js (the code the browser runs) and judges
// rows. Input (file named by argv[2]): [{spec, rows}]. Output (stdout): one entry per spec,
// either an array of booleans (one per row) or {"error": "..."} when Ajv cannot compile it.
"use strict";
const fs = require("fs");
const path = require("path");

globalThis.window = globalThis;
const staticDir = path.join(__dirname, "..", "..", "api", "static");
require(path.join(staticDir, "vendor", "ajv2020.bundle.js"));
require(path.join(staticDir, "rowcheck.js"));
const { newAjv, compileRowCheck } = globalThis.MarketplaceRowCheck;

const cases = JSON.parse(fs.readFileSync(process.argv[2], "utf8"));
// One Ajv, emptied between data-specs (its meta-schemas kept): a new one per data-spec, as
// each page of the form has, costs about 15 ms more each and judges the same.
const ajv = newAjv();
const out = cases.map(({ spec, rows }) => {
  let check;
  ajv.removeSchema();
  try {
    check = compileRowCheck(ajv, spec);
  } catch (exc) {
    return { error: String(exc.message || exc) };
  }
  return rows.map((row) => Boolean(check(row)));
});
process.stdout.write(JSON.stringify(out));
