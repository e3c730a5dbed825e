// The contribution form: built from the model's data-spec at run time, validated in the
// browser with the same JSON Schema (Ajv, draft 2020-12), posted with the session cookie.
"use strict";

(function () {
  const app = document.getElementById("app");
  const modelId = Number(app.dataset.modelId);
  const cookieName = app.dataset.cookieName;
  const specUrl = `/api/models/${modelId}/data-spec`;
  const contributionsUrl = `/api/models/${modelId}/contributions`;
  const FINAL = new Set(["rewarded", "rejected", "failed"]);
  const POLL_MS = 2000;
  const POLL_LIMIT_MS = 30 * 60 * 1000;

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

  function tokenExpiry(token) {
    // A JWT's payload is base64url JSON; its `exp` bounds how long the cookie is kept.
    try {
      const part = token.split(".")[1].replace(/-/g, "+").replace(/_/g, "/");
      const claims = JSON.parse(atob(part + "=".repeat((4 - (part.length % 4)) % 4)));
      return typeof claims.exp === "number" ? claims.exp : null;
    } catch (_) {
      return null;
    }
  }

  function setCookie(value, maxAgeSeconds) {
    const secure = location.protocol === "https:" ? "; Secure" : "";
    document.cookie =
      `${cookieName}=${encodeURIComponent(value)}; Path=/; Max-Age=${maxAgeSeconds}` +
      `; SameSite=Strict${secure}`;
  }

  $("token-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const token = $("token-input").value.trim();
    if (!token) return;
    const exp = tokenExpiry(token);
    const maxAge = exp ? Math.max(0, Math.floor(exp - Date.now() / 1000)) : 7 * 24 * 3600;
    setCookie(token, maxAge);
    location.reload(); // the server checks the token and says who is signed in
  });

  $("sign-out").addEventListener("click", () => {
    setCookie("", 0);
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

  function readValue(field, control) {
    const raw = control.value;
    if (raw === "") return undefined;
    switch (field.kind) {
      case "enum":
        return field.options[Number(raw)];
      case "boolean":
        return raw === "true";
      case "integer":
      case "number": {
        const value = Number(raw);
        if (!Number.isFinite(value)) throw new Unparsable("must be a number");
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
    let manifestOk = true;
    if (manifest && !validateManifest(manifest)) {
      manifestOk = false;
      for (const error of validateManifest.errors) {
        const { field, message } = explain(error);
        showManifestError(field, message);
      }
    }
    const badRows = rows.filter(({ fieldset }) =>
      fieldset.querySelector(".field.invalid, .row-errors:not([hidden])")).length;
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

  // --- submitting ---------------------------------------------------------------------

  function showServerErrors(body, fieldsets) {
    const pattern = /^rows\[(\d+)\](?:\.([^.[\]]+))?/;
    const manifestPattern = /^manifest(?:\.([A-Za-z_]+))?/;
    showSummary(body.message || "The server refused the rows.");
    for (const error of body.errors || []) {
      const match = pattern.exec(error.path || "");
      const index = match ? Number(match[1]) : error.rowIndex;
      if (index >= 0 && fieldsets[index]) {
        showFieldError(fieldsets[index], match && match[2] ? match[2] : "", error.message);
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

  async function submit(event) {
    event.preventDefault();
    clearErrors();
    const fieldsets = rowElements();
    const rows = fieldsets.map((fieldset) => Object.assign({ fieldset }, readRow(fieldset)));
    const manifest = readManifest();
    if (!validateAll(rows, manifest)) return;
    if (!signedIn) {
      showSummary("The rows are valid, but you are not signed in: paste a session token above.");
      $("token-input").focus();
      return;
    }
    const body = { modelId, benchmarkSpecId: null, rows: rows.map((r) => r.row) };
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
        showServerErrors(answer, fieldsets);
      } else if (!response.ok) {
        showSummary(`Nothing was stored: ${answer.detail || answer.message || response.statusText}` +
          ` (HTTP ${response.status}).`);
      } else {
        addJob(answer);
        resetRows();
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

  function addJob(accepted) {
    $("jobs").hidden = false;
    const item = el("li", { class: "job", "data-job-id": accepted.jobId });
    item.appendChild(el("p", {}, [
      el("span", { text: `${accepted.submittedRows} rows accepted · job ` }),
      el("code", { class: "job-id", text: accepted.jobId }),
      el("span", { text: " · status " }),
      el("strong", { class: "job-status", text: "queued" }),
    ]));
    item.appendChild(el("p", { class: "job-detail help" }));
    $("job-list").prepend(item);
    pollJob(accepted.jobId, item, Date.now());
  }

  function describeJob(job) {
    const parts = [];
    if (job.reason) parts.push(job.reason);
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
      }
    } catch (_) {
      // A dropped poll is retried on the next tick.
    }
    if (Date.now() - started < POLL_LIMIT_MS) {
      setTimeout(() => pollJob(jobId, item, started), POLL_MS);
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
    const { Ajv2020, addFormats } = window.MarketplaceAjv;
    const ajv = new Ajv2020({ allErrors: true, strict: false });
    addFormats(ajv);
    try {
      validateRow = ajv.compile(schema);
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
