// The web form's verdict on a row, in one place: the browser (contribute.js) and the
// conformance test (tests/support/ajv_verdicts.js, under Node) run this very code.
// Ajv, draft 2020-12, formats asserted (ajv-formats), as the server's jsonschema-rs does.
// A null member is an absent one: the server stores it as an empty cell, which the pipeline
// reads as absent (docs/validation.md, "One verdict in three places").
(function (root) {
  "use strict";

  function newAjv() {
    const { Ajv2020, addFormats } = root.MarketplaceAjv;
    const ajv = new Ajv2020({ allErrors: true, strict: false });
    addFormats(ajv);
    return ajv;
  }

  // The row without its null members (other values, and anything not an object, as given).
  function present(row) {
    if (row === null || typeof row !== "object" || Array.isArray(row)) return row;
    if (!Object.values(row).includes(null)) return row;
    // fromEntries defines own members, "__proto__" included.
    return Object.fromEntries(Object.entries(row).filter(([, value]) => value !== null));
  }

  // A function row -> boolean with Ajv's `errors` of the last call, like Ajv's own.
  function compileRowCheck(ajv, schema) {
    const validate = ajv.compile(schema);
    function check(row) {
      let valid;
      try {
        valid = validate(present(row));
      } catch (exc) {
        // A data-spec Ajv cannot evaluate on this row (a reference loop that recurses
        // without end): the row is not judged valid, and the form says why.
        check.errors = [{ instancePath: "", keyword: "error", params: {},
          message: `could not be checked against the data-spec (${exc.message})` }];
        return false;
      }
      check.errors = validate.errors;
      return valid;
    }
    check.errors = null;
    return check;
  }

  root.MarketplaceRowCheck = { newAjv, present, compileRowCheck };
})(typeof window !== "undefined" ? window : globalThis);
