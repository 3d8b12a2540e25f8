/**
 * An Outpost connector's receiver in a Google Sheet (Apps Script).
 *
 * Each collection's changes go to the sheet named after it, one row per record: a record changed again is
 * updated in its row, a deleted one is marked deleted. A batch that arrives twice changes nothing the second
 * time: rows are keyed by scope and record id, and an older version never replaces a newer one.
 *
 * Set up (deploy/google-sheets/README.md):
 *   1. In the sheet, Extensions > Apps Script; paste this file.
 *   2. Deploy > New deployment > Web app; execute as yourself; who has access: anyone.
 *   3. outpost connector add --collection builds --url <the deployment's /exec URL>
 *
 * Apps Script gives a web app no request headers, so this cannot check Outpost-Signature: the deployment's URL,
 * which cannot be guessed, is the credential. Keep it as you would a chat's webhook URL.
 */

/** The columns before the records' fields. */
var OUTPOST_COLUMNS = ['recordId', 'scope', 'version', 'deleted', 'createdAt', 'updatedAt', 'receivedAt'];

function doPost(e) {
  var batch = JSON.parse(e.postData.contents);
  var lock = LockService.getScriptLock();
  lock.waitLock(30000);
  try {
    applyBatch(SpreadsheetApp.getActiveSpreadsheet(), batch);
  } finally {
    lock.releaseLock();
  }
  return ContentService.createTextOutput(JSON.stringify({ taken: batch.delivery }))
    .setMimeType(ContentService.MimeType.JSON);
}

/** Writes a batch's changes into `spreadsheet`. */
function applyBatch(spreadsheet, batch) {
  var sheet = spreadsheet.getSheetByName(batch.collection) || spreadsheet.insertSheet(batch.collection);
  var lastRow = sheet.getLastRow();
  var header = lastRow > 0 ? sheet.getRange(1, 1, 1, sheet.getLastColumn()).getValues()[0] : OUTPOST_COLUMNS.slice();
  var known = {};
  header.forEach(function (name) { known[name] = true; });
  batch.changes.forEach(function (change) {
    Object.keys(change.fields).sort().forEach(function (name) {
      if (!known[name]) {
        known[name] = true;
        header.push(name);
      }
    });
  });
  sheet.getRange(1, 1, 1, header.length).setValues([header]);

  var rows = {};
  if (lastRow > 1) {
    sheet.getRange(2, 1, lastRow - 1, 3).getValues().forEach(function (row, index) {
      rows[row[1] + '\u0000' + row[0]] = { row: index + 2, version: Number(row[2]) };
    });
  }
  var next = Math.max(lastRow, 1) + 1;
  batch.changes.forEach(function (change) {
    var key = change.scope + '\u0000' + change.recordId;
    var found = rows[key];
    if (found && found.version >= change.version) return;
    var values = header.map(function (name, column) {
      switch (column) {
        case 0: return text(change.recordId);
        case 1: return text(change.scope);
        case 2: return change.version;
        case 3: return change.tombstone;
        case 4: return change.createdAt;
        case 5: return change.updatedAt;
        case 6: return change.receivedAt || '';
        default: return change.tombstone ? '' : cell(change.fields[name], change.files && change.files[name]);
      }
    });
    var row = found ? found.row : next++;
    sheet.getRange(row, 1, 1, header.length).setValues([values]);
    rows[key] = { row: row, version: change.version };
  });
}

/**
 * A field's value as a cell: a file as a link to it, text as text, numbers and booleans as they are, anything else
 * as JSON, nothing for null.
 */
function cell(value, file) {
  if (file && /^https?:\/\//.test(file.url)) return link(file);
  if (value === null || value === undefined) return '';
  if (typeof value === 'string') return text(value);
  if (typeof value === 'number' || typeof value === 'boolean') return value;
  return JSON.stringify(value);
}

/**
 * Text the sheet keeps as it is: a leading apostrophe stops Sheets reading "00123" as a number, "2026-11-21" as
 * a date, or "=…" as a formula. An empty scope stays empty.
 */
function text(value) {
  return value === '' ? '' : "'" + value;
}

/**
 * A file's link, named by the file (or its type), with the date the link stops working: a HYPERLINK formula whose
 * quotes are doubled, so that nothing in the URL or the name can end the formula's strings.
 */
function link(file) {
  var label = (file.name || file.type || 'file') + (file.expiresAt ? ' (link until ' + file.expiresAt.slice(0, 10) + ')' : '');
  return '=HYPERLINK("' + file.url.replace(/"/g, '""') + '", "' + label.replace(/"/g, '""') + '")';
}
