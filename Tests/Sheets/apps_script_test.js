// Runs deploy/google-sheets/Code.gs against an in-memory stand-in for SpreadsheetApp that reads what is written
// as Sheets does (a leading apostrophe keeps text; otherwise numbers, dates and formulas are parsed): rows per
// record, updates in place, tombstones, batches sent twice, older versions, number-like ids, formula text, and
// doPost's answer.
// Run by SheetsReceiverTests (swift test); exits non-zero on the first failed check.
'use strict';
const fs = require('fs');
const path = require('path');
const vm = require('vm');
const assert = require('assert');

class Sheet {
  constructor() { this.cells = []; }
  getLastRow() { return this.cells.length; }
  getLastColumn() { return this.cells.reduce((n, row) => Math.max(n, row.length), 0); }
  getRange(row, column, rows, columns) {
    const sheet = this;
    return {
      getValues() {
        const values = [];
        for (let r = 0; r < rows; r++) {
          const line = sheet.cells[row - 1 + r] || [];
          values.push(Array.from({ length: columns }, (_, c) => line[column - 1 + c] ?? ''));
        }
        return values;
      },
      setValues(values) {
        assert.strictEqual(values.length, rows);
        values.forEach((line, r) => {
          assert.strictEqual(line.length, columns);
          while (sheet.cells.length < row + r) sheet.cells.push([]);
          line.forEach((value, c) => { sheet.cells[row - 1 + r][column - 1 + c] = typed(value); });
        });
      },
    };
  }
}

// What Sheets keeps of a value written with setValues: text after an apostrophe as it is; else a number, a date or
// a formula when the text reads as one.
function typed(value) {
  if (typeof value !== 'string') return value;
  if (value.startsWith("'")) return value.slice(1);
  if (value.startsWith('=')) return { formula: value };
  if (/^-?[0-9]+(\.[0-9]+)?$/.test(value)) return Number(value);
  if (/^[0-9]{4}-[0-9]{2}-[0-9]{2}$/.test(value)) return { date: value };
  return value;
}

class Spreadsheet {
  constructor() { this.sheets = {}; }
  getSheetByName(name) { return this.sheets[name] || null; }
  insertSheet(name) { return (this.sheets[name] = new Sheet()); }
}

const spreadsheet = new Spreadsheet();
const locks = [];
const context = {
  JSON,
  SpreadsheetApp: { getActiveSpreadsheet: () => spreadsheet },
  LockService: { getScriptLock: () => ({ waitLock: (ms) => locks.push(['wait', ms]), releaseLock: () => locks.push(['release']) }) },
  ContentService: {
    MimeType: { JSON: 'application/json' },
    createTextOutput: (text) => ({ text, setMimeType(type) { this.type = type; return this; } }),
  },
};
vm.createContext(context);
vm.runInContext(fs.readFileSync(path.join(__dirname, '../../deploy/google-sheets/Code.gs'), 'utf8'), context);

function change(recordId, version, fields, extra = {}) {
  return Object.assign({ recordId, scope: '', version, tombstone: false, fields, createdAt: '2026-11-21T09:00:00.000Z',
    updatedAt: '2026-11-21T09:0' + version + ':00.000Z', receivedAt: '2026-11-21T10:00:00.000Z' }, extra);
}
function post(batch) {
  return context.doPost({ postData: { contents: JSON.stringify(batch) } });
}
function rows() { return spreadsheet.getSheetByName('builds').cells; }

const first = { delivery: 'dlv_1', connector: 'con_1', collection: 'builds', sequence: 1, from: 'c1.0.0', to: 'c1.0.2',
  changes: [change('b1', 1, { site: 'North', crew: 4 }), change('b2', 1, { site: '=HYPERLINK("http://x")' })] };
const answer = post(first);
assert.strictEqual(answer.text, JSON.stringify({ taken: 'dlv_1' }));
assert.strictEqual(answer.type, 'application/json');
assert.deepStrictEqual(locks, [['wait', 30000], ['release']]);
assert.deepStrictEqual(rows()[0], ['recordId', 'scope', 'version', 'deleted', 'createdAt', 'updatedAt', 'receivedAt', 'crew', 'site']);
assert.deepStrictEqual(rows()[1].slice(0, 4).concat(rows()[1].slice(7)), ['b1', '', 1, false, 4, 'North']);
// Formula text is kept as text.
assert.strictEqual(rows()[2][8], '=HYPERLINK("http://x")');

// The same batch again changes nothing.
const before = JSON.stringify(rows());
post(first);
assert.strictEqual(JSON.stringify(rows()), before);

// A newer version updates its row in place; a new field is a new column; a tombstone marks the record deleted.
post({ delivery: 'dlv_2', connector: 'con_1', collection: 'builds', sequence: 2, from: 'c1.0.2', to: 'c1.0.5',
  changes: [change('b1', 2, { site: 'South', crew: 5, notes: 'roof on' }), change('b3', 1, { site: 'East' }),
    change('b2', 2, {}, { tombstone: true })] });
assert.strictEqual(rows().length, 4);
assert.deepStrictEqual(rows()[0].slice(7), ['crew', 'site', 'notes']);
assert.deepStrictEqual(rows()[1].slice(0, 3).concat(rows()[1].slice(7)), ['b1', '', 2, 5, 'South', 'roof on']);
assert.deepStrictEqual(rows()[2].slice(0, 4).concat(rows()[2].slice(7)), ['b2', '', 2, true, '', '', '']);
assert.deepStrictEqual(rows()[3].slice(0, 3).concat(rows()[3].slice(7)), ['b3', '', 1, '', 'East', '']);

// An older version, sent again after a replay, never replaces a newer one.
post(first);
assert.strictEqual(rows()[1][2], 2);
assert.strictEqual(rows()[1][8], 'South');

// The same record id in two scopes is two rows; null fields are empty cells; objects are JSON.
post({ delivery: 'dlv_3', connector: 'con_1', collection: 'builds', sequence: 3, from: 'c1.0.5', to: 'c1.0.7',
  changes: [change('b1', 1, { site: null, crew: { lead: 'Ana' } }, { scope: 'fair' })] });
assert.strictEqual(rows().length, 5);
assert.deepStrictEqual(rows()[4].slice(0, 2), ['b1', 'fair']);
assert.strictEqual(rows()[4][7], '{"lead":"Ana"}');
assert.strictEqual(rows()[4][8], '');
// Ids and values that read as numbers or dates stay text, so a record's row is found again.
post({ delivery: 'dlv_4', connector: 'con_1', collection: 'builds', sequence: 4, from: 'c1.0.7', to: 'c1.0.8',
  changes: [change('00123', 1, { permit: '2026-11-21', site: '0042' })] });
post({ delivery: 'dlv_5', connector: 'con_1', collection: 'builds', sequence: 5, from: 'c1.0.8', to: 'c1.0.9',
  changes: [change('00123', 2, { permit: '2026-11-22', site: '0042' })] });
assert.strictEqual(rows().length, 6);
assert.deepStrictEqual(rows()[5].slice(0, 3), ['00123', '', 2]);
assert.strictEqual(rows()[5][8], '0042');
assert.strictEqual(rows()[5][rows()[0].indexOf('permit')], '2026-11-22');
// A file field is a link to the file, named by it, with the day its link ends; quotes cannot break the formula.
post({ delivery: 'dlv_6', connector: 'con_1', collection: 'builds', sequence: 6, from: 'c1.0.9', to: 'c1.0.10',
  changes: [change('b7', 1, { photo: { $file: { sha256: 'ab', size: 5, type: 'image/jpeg', name: 'shed "1".jpg' } } },
    { files: { photo: { url: 'https://sync.example.org/files/ab?expires=1&signature=x"y', name: 'shed "1".jpg',
      type: 'image/jpeg', size: 5, expiresAt: '2026-12-05T09:00:00.000Z' } } })] });
const photo = rows()[6][rows()[0].indexOf('photo')];
assert.deepStrictEqual(photo, { formula:
  '=HYPERLINK("https://sync.example.org/files/ab?expires=1&signature=x""y", "shed ""1"".jpg (link until 2026-12-05)")' });
// A file without a link (a server with no public address) shows as the reference.
post({ delivery: 'dlv_7', connector: 'con_1', collection: 'builds', sequence: 7, from: 'c1.0.10', to: 'c1.0.11',
  changes: [change('b8', 1, { photo: { $file: { sha256: 'cd', size: 5, type: 'image/png' } } })] });
assert.strictEqual(rows()[7][rows()[0].indexOf('photo')], '{"$file":{"sha256":"cd","size":5,"type":"image/png"}}');
console.log('apps script receiver: all checks passed');
