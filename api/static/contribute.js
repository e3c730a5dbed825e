// The contribution form: rows come from a CSV (parsed here with Papa Parse) or are typed into
// fields built from the model's data-spec; every row is validated in the browser with the same
// JSON Schema (Ajv, draft 2020-12) and the rows are measured against the pipeline's §8
// thresholds (rendered into the page by the server) before anything is posted with the session
// cookie. A submitted job is then followed until the pipeline rewards or rejects it.
"use strict";

(function () {
  const app = document.getElementById("app");
  const modelId = Number(app.dataset.modelId);
  const specUrl = `/api/models/${modelId}/data-spec`;
  const contributionsUrl = `/api/models/${modelId}/contributions`;
  const FINAL = new Set(["rewarded", "rejected", "failed"]);
  const POLL_MS = 2000;
  const POLL_LIMIT_MS = 30 * 60 * 1000;
  // Failing CSV rows listed one by one; the count of the others is given after them.
  const LISTED_ROWS_MAX = 1000;
  const limits = {
    minRows: Number(app.dataset.minRows),
    completenessAbove: Number(app.dataset.completenessAbove),
    uniquenessAbove: Number(app.dataset.uniquenessAbove),
    columnCompletenessAbove: Number(app.dataset.columnCompletenessAbove),
    strict: app.dataset.strict === "true",
  };
  const STATUS_HINTS = {
    queued: "waiting for the next evaluation run",
    validating: "checking quality and personal data",
    evaluating: "retraining and scoring the model",
  };

  const $ = (id) => document.getElementById(id);
  const form = $("contribution-form");
  const rowsBox = $("rows");
  const summary = $("form-summary");

  let schema = null;
  let validateRow = null;
  let validateManifest = null;
  let fields = []; // [{name, kind, prop, required, options}]
  let nextUid = 0;
  let signedIn = Boolean(app.dataset.user);
  // The CSV last chosen or pasted: {name, text}; null when there is none.
  let csvSource = null;
  // The rows read from it by the last check: [{row, errors, number, line}].
  let csvRows = [];

  // --- session ------------------------------------------------------------------------

  function showSession(problem) {
    $("signed-in").hidden = !signedIn;
    $("signed-out").hidden = signedIn;
    if (signedIn) {
      $("session-user").textContent = app.dataset.user;
    } else {
      $("session-problem").textContent = problem || app.dataset.sessionProblem || "no session";
    }
  }

  // The server keeps the token as an HttpOnly cookie (`POST /session`): this script never
  // reads or writes the cookie, so no script injected into the page can take it.
  async function session(method, body) {
    const options = { method, credentials: "same-origin", headers: {} };
    if (body !== undefined) {
      options.headers["Content-Type"] = "application/json";
      options.body = JSON.stringify(body);
    }
    const response = await fetch("/session", options);
    if (response.ok) return null;
    const answer = await response.json().catch(() => ({}));
    return answer.detail || `HTTP ${response.status}`;
  }

  $("token-form").addEventListener("submit", async (event) => {
    event.preventDefault();
    const token = $("token-input").value.trim();
    if (!token) return;
    const problem = await session("POST", { token });
    if (problem) {
      showSession(`the token was refused: ${problem}`);
      return;
    }
    location.reload(); // the page is rendered again for the signed-in person
  });

  $("sign-out").addEventListener("click", async () => {
    await session("DELETE");
    location.reload();
  });

  // --- schema to fields ---------------------------------------------------------------

  function resolve(prop) {
    // Local references only (#/$defs/name), enough for data-specs that share definitions.
    let seen = 0;
    while (prop && typeof prop.$ref === "string" && prop.$ref.startsWith("#/") && seen < 10) {
      let target = schema;
      for (const part of prop.$ref.slice(2).split("/")) {
        target = target ? target[part.replace(/~1/g, "/").replace(/~0/g, "~")] : undefined;
      }
      prop = Object.assign({}, target || {}, prop, { $ref: undefined });
      seen += 1;
    }
    return prop || {};
  }

  function mainType(prop) {
    const types = Array.isArray(prop.type) ? prop.type : prop.type ? [prop.type] : [];
    return types.find((t) => t !== "null") || null;
  }

  function kindOf(prop) {
    if (Array.isArray(prop.enum)) return "enum";
    if (prop.const !== undefined) return "enum";
    const type = mainType(prop);
    if (type === "boolean") return "boolean";
    if (type === "integer" || type === "number") return type;
    if (type === "string") return "string";
    return "json";
  }

  function describeBounds(prop, kind) {
    const parts = [];
    if (kind === "integer" || kind === "number") {
      parts.push(kind === "integer" ? "whole number" : "number");
      const lo = prop.minimum ?? prop.exclusiveMinimum;
      const hi = prop.maximum ?? prop.exclusiveMaximum;
      if (lo !== undefined && hi !== undefined) parts.push(`${lo} to ${hi}`);
      else if (lo !== undefined) parts.push(`at least ${lo}`);
      else if (hi !== undefined) parts.push(`at most ${hi}`);
    } else if (kind === "string") {
      if (prop.format) parts.push(prop.format);
      if (prop.maxLength !== undefined) parts.push(`up to ${prop.maxLength} characters`);
    } else if (kind === "json") {
      parts.push("JSON value");
    }
    return parts.join(", ");
  }

  function buildFields() {
    const props = schema.properties || {};
    const required = new Set(schema.required || []);
    fields = Object.keys(props).map((name) => {
      const prop = resolve(props[name]);
      const kind = kindOf(prop);
      const options = kind === "enum" ? (prop.enum !== undefined ? prop.enum : [prop.const]) : [];
      return { name, prop, kind, options, required: required.has(name) };
    });
  }

  // --- rendering ----------------------------------------------------------------------

  function el(tag, attrs, children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(attrs || {})) {
      if (value === undefined || value === null || value === false) continue;
      if (key === "text") node.textContent = value;
      else node.setAttribute(key, value === true ? "" : String(value));
    }
    for (const child of children || []) if (child) node.appendChild(child);
    return node;
  }

  function inputFor(field, id, describedBy) {
    const common = {
      id,
      name: field.name,
      "data-kind": field.kind,
      "aria-describedby": describedBy,
      "aria-required": field.required ? "true" : undefined,
    };
    const prop = field.prop;
    if (field.kind === "enum") {
      const select = el("select", common, [el("option", { value: "", text: "— choose —" })]);
      field.options.forEach((value, i) => {
        select.appendChild(el("option", { value: String(i), text: String(value) }));
      });
      return select;
    }
    if (field.kind === "boolean") {
      return el("select", common, [
        el("option", { value: "", text: "— choose —" }),
        el("option", { value: "true", text: "yes (true)" }),
        el("option", { value: "false", text: "no (false)" }),
      ]);
    }
    if (field.kind === "integer" || field.kind === "number") {
      return el("input", Object.assign(common, {
        type: "number",
        inputmode: field.kind === "integer" ? "numeric" : "decimal",
        step: field.kind === "integer" ? "1" : "any",
        min: prop.minimum ?? prop.exclusiveMinimum,
        max: prop.maximum ?? prop.exclusiveMaximum,
      }));
    }
    if (field.kind === "string") {
      const type = { email: "email", uri: "url", date: "date" }[prop.format] || "text";
      return el("input", Object.assign(common, {
        type,
        maxlength: prop.maxLength,
        minlength: prop.minLength,
        placeholder: prop.examples && prop.examples.length ? String(prop.examples[0]) : undefined,
      }));
    }
    return el("textarea", Object.assign(common, { rows: 2, placeholder: "JSON" }));
  }

  function renderRow() {
    const uid = nextUid++;
    const fieldset = el("fieldset", { class: "row", "data-uid": uid });
    const legend = el("legend");
    const remove = el("button", { type: "button", class: "link remove-row", text: "Remove" });
    remove.addEventListener("click", () => {
      fieldset.remove();
      renumber();
    });
    fieldset.appendChild(legend);
    fieldset.appendChild(remove);
    fieldset.appendChild(el("div", { class: "row-errors", role: "alert", hidden: true }));
    const grid = el("div", { class: "fields" });
    for (const field of fields) {
      const id = `r${uid}-${field.name}`;
      const help = field.prop.description || "";
      const bounds = describeBounds(field.prop, field.kind);
      const label = el("label", { for: id }, [
        el("span", { class: "name", text: field.prop.title || field.name }),
        field.required ? el("span", { class: "req", title: "required", text: " *" }) : null,
      ]);
      const box = el("div", { class: "field", "data-field": field.name }, [
        label,
        inputFor(field, id, `${id}-help ${id}-error`),
        el("p", {
          class: "help",
          id: `${id}-help`,
          text: [help, bounds].filter(Boolean).join(" · "),
        }),
        el("p", { class: "error", id: `${id}-error` }),
      ]);
      grid.appendChild(box);
    }
    if (!fields.length) {
      const id = `r${uid}-row`;
      grid.appendChild(el("div", { class: "field wide", "data-field": "" }, [
        el("label", { for: id, text: "Row (JSON object)" }),
        el("textarea", { id, name: "", "data-kind": "row", rows: 3 }),
        el("p", { class: "error", id: `${id}-error` }),
      ]));
    }
    fieldset.appendChild(grid);
    rowsBox.appendChild(fieldset);
    renumber();
    return fieldset;
  }

  function rowElements() {
    return Array.from(rowsBox.querySelectorAll("fieldset.row"));
  }

  function renumber() {
    const rows = rowElements();
    rows.forEach((row, index) => {
      row.dataset.rowIndex = String(index);
      row.querySelector("legend").textContent = `Row ${index + 1}`;
      row.querySelector(".remove-row").hidden = rows.length === 1;
    });
  }

  // --- reading and validating ---------------------------------------------------------

  class Unparsable extends Error {}

  const NUMBER = /^[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?$/;

  // A value written as text (a CSV cell, a text or number input) as the data-spec's type;
  // undefined for an empty one, which is a missing value. Throws Unparsable.
  function parseText(field, raw) {
    if (raw === "") return undefined;
    switch (field.kind) {
      case "enum": {
        // A CSV cell names the value itself; "1" is the 1 of an integer enum.
        const found = field.options.find((option) => String(option) === raw);
        return found === undefined ? raw : found; // Ajv names the allowed values
      }
      case "boolean": {
        const word = raw.trim().toLowerCase();
        if (word === "true") return true;
        if (word === "false") return false;
        throw new Unparsable("must be true or false");
      }
      case "integer":
      case "number": {
        const value = Number(raw.trim());
        if (!NUMBER.test(raw.trim()) || !Number.isFinite(value)) {
          throw new Unparsable("must be a number");
        }
        return value;
      }
      case "string":
        return raw;
      default:
        try {
          return JSON.parse(raw);
        } catch (_) {
          throw new Unparsable("is not valid JSON");
        }
    }
  }

  function readValue(field, control) {
    const raw = control.value;
    if (raw === "") return undefined;
    // Selects carry the option's index (enums) or "true"/"false" (booleans).
    if (field.kind === "enum") return field.options[Number(raw)];
    if (field.kind === "boolean") return raw === "true";
    return parseText(field, raw);
  }

  // Returns {row, errors}; errors are [{field, message}] for values that could not be read.
  function readRow(fieldset) {
    const row = {};
    const errors = [];
    if (!fields.length) {
      const raw = fieldset.querySelector("textarea").value.trim();
      try {
        return { row: raw ? JSON.parse(raw) : {}, errors };
      } catch (_) {
        return { row: {}, errors: [{ field: "", message: "is not valid JSON" }] };
      }
    }
    for (const field of fields) {
      const control = fieldset.querySelector(`[data-field="${CSS.escape(field.name)}"] [name]`);
      try {
        const value = readValue(field, control);
        if (value !== undefined) row[field.name] = value;
      } catch (exc) {
        if (!(exc instanceof Unparsable)) throw exc;
        errors.push({ field: field.name, message: exc.message });
      }
    }
    return { row, errors };
  }

  function pointerField(pointer) {
    // "/tenure_months/0" -> "tenure_months"
    const first = pointer.split("/")[1];
    return first === undefined ? "" : first.replace(/~1/g, "/").replace(/~0/g, "~");
  }

  function explain(error) {
    if (error.keyword === "pattern" && error.instancePath === "/wallet_address") {
      return { field: "wallet_address", message: "must be 0x followed by 40 hexadecimal characters" };
    }
    if (error.keyword === "required") {
      return { field: error.params.missingProperty, message: "is required" };
    }
    if (error.keyword === "additionalProperties") {
      return { field: "", message: `“${error.params.additionalProperty}” is not an allowed field` };
    }
    let message = error.message;
    if (error.keyword === "enum") {
      message += `: ${error.params.allowedValues.map((v) => JSON.stringify(v)).join(", ")}`;
    }
    return { field: pointerField(error.instancePath), message };
  }

  function clearErrors() {
    summary.hidden = true;
    summary.textContent = "";
    for (const node of form.querySelectorAll(".error")) node.textContent = "";
    for (const node of form.querySelectorAll(".row-errors")) {
      node.textContent = "";
      node.hidden = true;
    }
    for (const node of form.querySelectorAll("[aria-invalid]")) node.removeAttribute("aria-invalid");
    for (const node of form.querySelectorAll(".field.invalid")) node.classList.remove("invalid");
  }

  // Editing a value takes its error away; the next submit checks it again.
  function clearFieldError(control) {
    const box = control && control.closest ? control.closest(".field") : null;
    if (!box || !box.classList.contains("invalid")) return;
    box.classList.remove("invalid");
    control.removeAttribute("aria-invalid");
    box.querySelector(".error").textContent = "";
    if (!form.querySelector(".field.invalid, .row-errors:not([hidden])")) {
      summary.hidden = true; // every error shown has been edited away
      summary.textContent = "";
    }
  }

  function showFieldError(fieldset, fieldName, message) {
    const box = fieldName !== "" && fieldset
      ? fieldset.querySelector(`.field[data-field="${CSS.escape(fieldName)}"]`)
      : null;
    if (!box) {
      const where = fieldset ? fieldset.querySelector(".row-errors") : summary;
      const prefix = fieldName ? `${fieldName}: ` : "";
      where.appendChild(el("p", { text: prefix + message }));
      where.hidden = false;
      return where;
    }
    box.classList.add("invalid");
    const control = box.querySelector("[name]");
    control.setAttribute("aria-invalid", "true");
    const target = box.querySelector(".error");
    target.textContent = target.textContent ? `${target.textContent}; ${message}` : message;
    return control;
  }

  function showSummary(text) {
    summary.appendChild(el("p", { text }));
    summary.hidden = false;
  }

  function readManifest() {
    const names = ["contributor_id", "wallet_address", "data_description", "data_source", "license"];
    const manifest = {};
    for (const name of names) {
      const value = $(`m-${name}`).value.trim();
      if (value) manifest[name] = value;
    }
    return Object.keys(manifest).length ? manifest : null;
  }

  function showManifestError(name, message) {
    const target = $(`m-${name}-error`);
    const control = $(`m-${name}`);
    if (!target || !control) {
      showSummary(message.startsWith("manifest") ? message : `manifest.${name}: ${message}`);
      return;
    }
    target.textContent = message;
    control.setAttribute("aria-invalid", "true");
    control.closest(".field").classList.add("invalid");
    $("manifest").open = true;
  }

  // Shows the manifest's errors at its fields; true when there is none (or no manifest).
  function checkManifest(manifest) {
    if (!manifest || validateManifest(manifest)) return true;
    for (const error of validateManifest.errors) {
      const { field, message } = explain(error);
      showManifestError(field, message);
    }
    return false;
  }

  // Validates every row and the manifest; shows errors and returns false when any failed.
  function validateAll(rows, manifest) {
    let firstBad = null;
    rows.forEach(({ fieldset, row, errors }) => {
      for (const e of errors) {
        const shown = showFieldError(fieldset, e.field, e.message);
        firstBad = firstBad || shown;
      }
      const unreadable = new Set(errors.map((e) => e.field));
      if (!validateRow(row)) {
        for (const error of validateRow.errors) {
          const { field, message } = explain(error);
          if (unreadable.has(field)) continue;
          const shown = showFieldError(fieldset, field, message);
          firstBad = firstBad || shown;
        }
      }
    });
    const manifestOk = checkManifest(manifest);
    const badRows = rows.filter(({ fieldset }) =>
      fieldset.querySelector(".field.invalid, .row-errors:not([hidden])")).length;
    showPrecheck(rows.map((r) => r.row), badRows);
    if (badRows || !manifestOk) {
      const parts = [];
      if (badRows) parts.push(`${badRows} of ${rows.length} rows need fixing`);
      if (!manifestOk) parts.push("the reward recipient needs fixing");
      showSummary(`Nothing was sent: ${parts.join("; ")}.`);
      if (firstBad && firstBad.focus) firstBad.focus();
      return false;
    }
    return true;
  }

  // --- CSV ----------------------------------------------------------------------------

  // Reads CSV text: the header line names data-spec fields, each further line is a row.
  // Returns {problems: [header problems], rows: [{row, errors, number, line}]}; a row's
  // `number` counts data rows from 1 (the header not counted), `line` is its line in the text.
  function readCsv(source) {
    const text = source.replace(/^\uFEFF/, "");
    const byName = new Map(fields.map((field) => [field.name, field]));
    const closed = schema.additionalProperties === false;
    const problems = [];
    const rows = [];
    let header = null;
    let lineBreak = "\n";
    let counted = 0; // the offset after the last line break counted
    let lines = 1; // the line number at `counted`
    let previousEnd = 0;
    const blankLines = /(?:[ \t]*\r?\n|[ \t]*\r)*/y;

    function lineAt(offset) {
      // Offsets only grow, so each line break is counted once.
      for (;;) {
        const next = text.indexOf(lineBreak, counted);
        if (next === -1 || next >= offset) return lines;
        lines += 1;
        counted = next + lineBreak.length;
      }
    }

    function startLine(end) {
      // Greedy skipping drops blank lines between rows: the row starts after them.
      blankLines.lastIndex = previousEnd;
      blankLines.exec(text);
      const start = blankLines.lastIndex;
      previousEnd = end;
      return lineAt(start);
    }

    window.Papa.parse(text, {
      skipEmptyLines: "greedy",
      step: (result) => {
        lineBreak = result.meta.linebreak || lineBreak;
        const line = startLine(result.meta.cursor);
        const cells = result.data;
        if (header === null) {
          header = cells.map((name) => name.trim());
          const seen = new Set();
          header.forEach((name, i) => {
            if (!name) problems.push(`column ${i + 1} of the header has no name`);
            else if (seen.has(name)) problems.push(`column “${name}” appears twice`);
            else if (closed && !byName.has(name)) {
              problems.push(`column “${name}” is not a field of the data-spec`);
            }
            seen.add(name);
          });
          for (const name of schema.required || []) {
            if (!seen.has(name)) problems.push(`required column “${name}” is missing`);
          }
          return;
        }
        const entry = { row: {}, errors: [], number: rows.length + 1, line };
        for (const error of result.errors) entry.errors.push({ field: "", message: error.message });
        if (cells.length !== header.length) {
          entry.errors.push({
            field: "",
            message: `has ${cells.length} values, the header names ${header.length} columns`,
          });
        }
        header.forEach((name, i) => {
          if (!name || i >= cells.length) return;
          const field = byName.get(name);
          try {
            const value = field ? parseText(field, cells[i]) : cells[i] === "" ? undefined : cells[i];
            if (value !== undefined) entry.row[name] = value;
          } catch (exc) {
            if (!(exc instanceof Unparsable)) throw exc;
            entry.errors.push({ field: name, message: exc.message });
          }
        });
        rows.push(entry);
      },
    });
    if (header === null) problems.push("there is no header line");
    return { problems, rows };
  }

  // Every problem of every row: the cells that could not be read, then the data-spec's errors.
  function rowProblems(entry) {
    const problems = entry.errors.slice();
    const unreadable = new Set(entry.errors.map((e) => e.field));
    if (!validateRow(entry.row)) {
      for (const error of validateRow.errors) {
        const problem = explain(error);
        if (!unreadable.has(problem.field)) problems.push(problem);
      }
    }
    return problems;
  }

  function describeProblems(problems) {
    return problems.map((p) => (p.field ? `${p.field}: ${p.message}` : p.message)).join("; ");
  }

  function rowLabel(entry) {
    return entry.line === undefined ? `Row ${entry.number}` : `Row ${entry.number} (line ${entry.line})`;
  }

  function listRowProblem(entry, text) {
    const list = $("csv-errors");
    if (list.children.length >= LISTED_ROWS_MAX) return false;
    list.appendChild(el("li", { "data-row": entry.number }, [
      el("strong", { text: rowLabel(entry) }),
      el("span", { text: `: ${text}` }),
    ]));
    return true;
  }

  function clearCsvReport() {
    $("csv-report").hidden = true;
    $("csv-summary").textContent = "";
    $("csv-errors").textContent = "";
    $("precheck").hidden = true;
    csvRows = [];
  }

  // Checks the CSV last chosen or pasted; shows every failing row. Returns the rows when
  // all of them match the data-spec, null otherwise.
  function checkCsv() {
    clearCsvReport();
    const report = $("csv-report");
    const summaryLine = $("csv-summary");
    report.hidden = false;
    report.dataset.state = "bad";
    if (!csvSource || !csvSource.text.trim()) {
      summaryLine.textContent = "Choose a CSV file or paste CSV text first.";
      return null;
    }
    const { problems, rows } = readCsv(csvSource.text);
    if (problems.length) {
      summaryLine.textContent =
        `The header line of ${csvSource.name} needs fixing (the columns are ` +
        `${fields.map((f) => f.name).join(", ")}):`;
      for (const problem of problems) $("csv-errors").appendChild(el("li", { text: problem }));
      return null;
    }
    csvRows = rows;
    let failing = 0;
    for (const entry of rows) {
      const found = rowProblems(entry);
      if (!found.length) continue;
      failing += 1;
      listRowProblem(entry, describeProblems(found));
    }
    showPrecheck(rows.map((entry) => entry.row), failing);
    if (!rows.length) {
      summaryLine.textContent = `${csvSource.name} has a header line but no rows.`;
      return null;
    }
    if (failing) {
      const listed = $("csv-errors").children.length;
      summaryLine.textContent =
        `${failing} of ${rows.length} rows in ${csvSource.name} do not match the data-spec` +
        (listed < failing ? ` (the first ${listed} are listed)` : "") + ":";
      return null;
    }
    report.dataset.state = "ok";
    summaryLine.textContent = `${rows.length} rows read from ${csvSource.name}; every row matches the data-spec.`;
    return rows.map((entry) => entry.row);
  }

  // --- the §8 checks, measured here as the pipeline measures them ------------------------

  // The pipeline stores rows with one column per data-spec field (missing values as nulls),
  // and counts completeness and distinct rows over those columns.
  function measure(rows) {
    const columns = fields.length
      ? fields.map((f) => f.name)
      : Array.from(new Set(rows.flatMap((row) => Object.keys(row))));
    const filled = new Array(columns.length).fill(0);
    const distinct = new Set();
    for (const row of rows) {
      const values = columns.map((name, i) => {
        const value = row[name];
        if (value === undefined || value === null) return null;
        filled[i] += 1;
        return value;
      });
      distinct.add(JSON.stringify(values));
    }
    const cells = rows.length * columns.length;
    const share = (part, whole) => (whole ? part / whole : 0);
    return {
      rows: rows.length,
      completeness: share(filled.reduce((a, b) => a + b, 0), cells),
      uniqueness: share(distinct.size, rows.length),
      columns: columns.map((name, i) => ({ name, share: share(filled[i], rows.length) })),
    };
  }

  function pct(share) {
    return `${(share * 100).toFixed(1)} %`;
  }

  // Shows the table of checks for these rows; returns the failures that reject them.
  function showPrecheck(rows, failingRows) {
    const m = measure(rows);
    const sparse = m.columns.filter((c) => !(c.share > limits.columnCompletenessAbove));
    const checks = [
      {
        name: "row_count", label: "rows", required: `at least ${limits.minRows}`,
        value: String(m.rows), ok: m.rows >= limits.minRows, rejects: true,
        why: `${m.rows} rows (at least ${limits.minRows} required)`,
      },
      {
        name: "completeness", label: "completeness",
        required: `above ${pct(limits.completenessAbove)}`, value: pct(m.completeness),
        ok: m.completeness > limits.completenessAbove, rejects: true,
        why: `completeness ${pct(m.completeness)} (above ${pct(limits.completenessAbove)} required)`,
      },
      {
        name: "uniqueness", label: "unique rows", required: `above ${pct(limits.uniquenessAbove)}`,
        value: pct(m.uniqueness), ok: m.uniqueness > limits.uniquenessAbove, rejects: true,
        why: `unique rows ${pct(m.uniqueness)} (above ${pct(limits.uniquenessAbove)} required)`,
      },
      {
        name: "schema_compliance", label: "rows matching the data-spec", required: "100 %",
        value: m.rows ? pct((m.rows - failingRows) / m.rows) : "–", ok: failingRows === 0,
        rejects: true, why: `${failingRows} rows do not match the data-spec`,
      },
      {
        name: "column_completeness", label: "each field filled",
        required: `above ${pct(limits.columnCompletenessAbove)}${limits.strict ? "" : " (warning)"}`,
        value: sparse.length ? sparse.map((c) => `${c.name} ${pct(c.share)}`).join(", ") : "yes",
        ok: sparse.length === 0, rejects: limits.strict,
        why: `fields filled in too few rows: ${sparse.map((c) => c.name).join(", ")}`,
      },
    ];
    const body = $("precheck-rows");
    body.textContent = "";
    for (const check of checks) {
      const verdict = check.ok ? "passes" : check.rejects ? "rejected" : "warning";
      body.appendChild(el("tr", { "data-check": check.name, "data-verdict": verdict }, [
        el("td", { text: check.label }),
        el("td", { text: check.required }),
        el("td", { class: "figure", text: check.value }),
        el("td", { class: "verdict", text: verdict }),
      ]));
    }
    $("precheck").hidden = false;
    return checks.filter((c) => !c.ok && c.rejects);
  }

  function currentSource() {
    return form.querySelector("input[name=source]:checked").value;
  }

  function showSource() {
    const csv = currentSource() === "csv";
    $("csv-panel").hidden = !csv;
    $("typed-panel").hidden = csv;
    $("precheck").hidden = true;
    clearErrors();
  }

  async function chooseFile() {
    const file = $("csv-file").files[0];
    if (!file) return;
    $("csv-text").value = "";
    csvSource = { name: file.name, text: await file.text() };
    checkCsv();
  }

  function pasteText() {
    $("csv-file").value = "";
    const text = $("csv-text").value;
    csvSource = text.trim() ? { name: "the pasted text", text } : null;
    clearCsvReport();
  }

  // --- submitting ---------------------------------------------------------------------

  // Shows the server's §2.4 errors; `showRowError(index, field, message)` places one at the
  // row it names and returns false when there is no such row.
  function showServerErrors(body, showRowError) {
    const pattern = /^rows\[(\d+)\](?:\.([^.[\]]+))?/;
    const manifestPattern = /^manifest(?:\.([A-Za-z_]+))?/;
    showSummary(`Nothing was stored: ${body.message || "the server refused the rows."}`);
    for (const error of body.errors || []) {
      const match = pattern.exec(error.path || "");
      const index = match ? Number(match[1]) : error.rowIndex;
      if (index >= 0 && showRowError(index, match && match[2] ? match[2] : "", error.message)) {
        continue;
      }
      const manifestMatch = manifestPattern.exec(error.path || "");
      if (manifestMatch) {
        // The server names the manifest field in its message: "manifest: license: …".
        const named = /^manifest: ([A-Za-z_]+): ([\s\S]*)$/.exec(error.message || "");
        if (!manifestMatch[1] && named && $(`m-${named[1]}`)) {
          showManifestError(named[1], named[2]);
        } else {
          showManifestError(manifestMatch[1] || "", error.message);
        }
        continue;
      }
      showSummary(`${error.path}: ${error.message}`);
    }
  }

  // The rows to send, checked, with a way to place the server's row errors; null (and every
  // problem shown) when nothing may be sent.
  function collectRows(manifest) {
    if (currentSource() === "typed") {
      const fieldsets = rowElements();
      const rows = fieldsets.map((fieldset) => Object.assign({ fieldset }, readRow(fieldset)));
      if (!validateAll(rows, manifest)) return null;
      return {
        rows: rows.map((r) => r.row),
        showRowError: (index, field, message) => {
          if (!fieldsets[index]) return false;
          showFieldError(fieldsets[index], field, message);
          return true;
        },
      };
    }
    const manifestOk = checkManifest(manifest);
    const rows = checkCsv();
    if (!rows || !manifestOk) {
      const parts = [];
      if (!rows) parts.push(csvSource ? "the CSV needs fixing (see below)" : "there are no rows yet");
      if (!manifestOk) parts.push("the reward recipient needs fixing");
      showSummary(`Nothing was sent: ${parts.join("; ")}.`);
      if (!rows) $("csv-report").scrollIntoView({ block: "nearest" });
      return null;
    }
    const entries = csvRows;
    return {
      rows,
      showRowError: (index, field, message) => {
        const entry = entries[index];
        if (!entry) return false;
        $("csv-report").hidden = false;
        $("csv-report").dataset.state = "bad";
        $("csv-summary").textContent = "The server refused these rows:";
        listRowProblem(entry, describeProblems([{ field, message }]));
        return true;
      },
    };
  }

  async function submit(event) {
    event.preventDefault();
    clearErrors();
    const manifest = readManifest();
    const collected = collectRows(manifest);
    if (!collected) return;
    const rejected = showPrecheck(collected.rows, 0).map((check) => check.why);
    if (rejected.length) {
      showSummary(`Nothing was sent: the pipeline would reject these rows: ${rejected.join("; ")}.`);
      $("precheck").scrollIntoView({ block: "nearest" });
      return;
    }
    if (!signedIn) {
      showSummary("The rows are valid, but you are not signed in: paste a session token above.");
      $("token-input").focus();
      return;
    }
    const body = { modelId, benchmarkSpecId: null, rows: collected.rows };
    if (manifest) body.manifest = manifest;
    const button = $("submit");
    button.disabled = true;
    button.textContent = "Submitting…";
    try {
      const response = await fetch(contributionsUrl, {
        method: "POST",
        credentials: "same-origin",
        headers: { "Content-Type": "application/json", Accept: "application/json" },
        body: JSON.stringify(body),
      });
      const answer = await response.json().catch(() => ({}));
      if (response.status === 401) {
        signedIn = false;
        showSession(answer.detail || "the session was refused");
        showSummary("Nothing was stored: the server did not accept your session. Sign in again.");
      } else if (response.status === 400 && Array.isArray(answer.errors)) {
        showServerErrors(answer, collected.showRowError);
      } else if (!response.ok) {
        showSummary(`Nothing was stored: ${answer.detail || answer.message || response.statusText}` +
          ` (HTTP ${response.status}).`);
      } else {
        addJob(answer);
        if (currentSource() === "typed") {
          resetRows();
        } else {
          $("csv-file").value = "";
          $("csv-text").value = "";
          csvSource = null;
          clearCsvReport();
        }
      }
    } catch (exc) {
      showSummary(`The request did not reach the server (${exc.message}). Try again.`);
    } finally {
      button.disabled = false;
      button.textContent = "Submit rows";
    }
  }

  function resetRows() {
    rowsBox.textContent = "";
    renderRow();
  }

  // --- jobs ---------------------------------------------------------------------------

  function addJob(submitted) {
    $("jobs").hidden = false;
    const item = el("li", { class: "job", "data-job-id": submitted.jobId, "data-status": "queued" });
    item.appendChild(el("p", {}, [
      el("span", { class: "job-submitted", text: `${submitted.submittedRows} rows submitted · job ` }),
      el("code", { class: "job-id", text: submitted.jobId }),
      el("span", { text: " · status " }),
      el("strong", { class: "job-status", text: "queued" }),
    ]));
    item.appendChild(el("p", { class: "job-detail help", text: STATUS_HINTS.queued }));
    $("job-list").prepend(item);
    pollJob(submitted.jobId, item, Date.now());
  }

  function describeJob(job) {
    const parts = [];
    if (job.reason) parts.push(job.reason);
    else if (STATUS_HINTS[job.status]) parts.push(STATUS_HINTS[job.status]);
    // The API's reason usually names the due time already (in UTC); say it again only when not.
    const dueToTheSecond = (job.evaluationDueAt || "").replace(/\.\d+/, "");
    const reasonHasDue = Boolean(job.reason && dueToTheSecond && job.reason.includes(dueToTheSecond));
    if (job.status === "queued" && job.evaluationDueAt && !reasonHasDue) {
      const due = new Date(job.evaluationDueAt);
      if (!Number.isNaN(due.getTime())) {
        parts.push(`evaluation expected to start at ${due.toLocaleTimeString()}`);
      }
    }
    if (job.improvementPct !== null && job.improvementPct !== undefined) {
      parts.push(`improvement ${Number(job.improvementPct).toFixed(2)} %`);
    }
    if (job.tokens !== null && job.tokens !== undefined) parts.push(`${job.tokens} reward tokens`);
    return parts.join(" · ");
  }

  async function pollJob(jobId, item, started) {
    try {
      const response = await fetch(`${contributionsUrl}/${encodeURIComponent(jobId)}`, {
        credentials: "same-origin",
        headers: { Accept: "application/json" },
      });
      if (response.ok) {
        const job = await response.json();
        item.querySelector(".job-status").textContent = job.status;
        item.dataset.status = job.status;
        item.querySelector(".job-detail").textContent = describeJob(job);
        if (FINAL.has(job.status)) return;
      } else if (response.status === 401 || response.status === 404) {
        // Retrying cannot help: the session ended, or the job is not this user's.
        item.querySelector(".job-detail").textContent =
          `no longer followed here (HTTP ${response.status}): sign in again and reload the job`;
        return;
      }
    } catch (_) {
      // A dropped poll is retried on the next tick.
    }
    if (Date.now() - started < POLL_LIMIT_MS) {
      setTimeout(() => pollJob(jobId, item, started), POLL_MS);
    } else {
      item.querySelector(".job-detail").textContent +=
        " · no longer followed here: reload the job with its id to see how it ended";
    }
  }

  // --- start --------------------------------------------------------------------------

  const MANIFEST_SCHEMA = {
    type: "object",
    required: ["contributor_id", "wallet_address", "data_description", "data_source", "license"],
    properties: {
      contributor_id: { type: "string", minLength: 1, maxLength: 200 },
      wallet_address: { type: "string", pattern: "^0x[0-9a-fA-F]{40}$" },
      data_description: { type: "string", minLength: 1, maxLength: 10000 },
      data_source: { type: "string", minLength: 1, maxLength: 2000 },
      license: { type: "string", minLength: 1 },
    },
  };

  async function start() {
    showSession();
    const status = $("spec-status");
    let response;
    try {
      response = await fetch(specUrl, { headers: { Accept: "application/schema+json" } });
    } catch (exc) {
      status.textContent = `Could not load the data-spec (${exc.message}).`;
      return;
    }
    if (!response.ok) {
      status.textContent = `Could not load the data-spec (HTTP ${response.status}).`;
      return;
    }
    schema = await response.json();
    const { newAjv, compileRowCheck } = window.MarketplaceRowCheck;
    const ajv = newAjv();
    try {
      validateRow = compileRowCheck(ajv, schema);
    } catch (exc) {
      status.textContent = `The data-spec could not be compiled: ${exc.message}`;
      return;
    }
    validateManifest = ajv.compile(MANIFEST_SCHEMA);
    buildFields();
    renderRow();
    form.hidden = false;
    status.textContent = schema.description || "";
    status.hidden = !schema.description;
    $("csv-columns").textContent = fields.map((f) => f.name).join(",");
    $("csv-text").placeholder = fields.map((f) => f.name).join(",");
    for (const radio of form.querySelectorAll("input[name=source]")) {
      radio.addEventListener("change", showSource);
    }
    $("csv-file").addEventListener("change", chooseFile);
    $("csv-text").addEventListener("input", pasteText);
    $("csv-check").addEventListener("click", checkCsv);
    $("add-row").addEventListener("click", () => {
      const row = renderRow();
      const first = row.querySelector("[name]");
      if (first) first.focus();
    });
    form.addEventListener("submit", submit);
    form.addEventListener("input", (event) => clearFieldError(event.target));
    form.addEventListener("change", (event) => clearFieldError(event.target));
    app.dataset.ready = "true";
  }

  start();
})();
