// errors.js: typed errors for sbqueue's SQLSTATEs (API.md, "Errors").
'use strict';

class SbqError extends Error {
    constructor(message, sqlstate, cause) {
        super(message, cause ? { cause } : undefined);
        this.name = this.constructor.name;
        this.sqlstate = sqlstate;
        this.detail = cause && cause.detail;
        this.hint = cause && cause.hint;
    }
}

const TABLE = [
    ['QueueNotFound', 'SB001'], ['MessageLockLost', 'SB002'], ['MessageNotFound', 'SB003'],
    ['SessionLockLost', 'SB004'], ['SessionCannotBeLocked', 'SB005'],
    ['QueueAlreadyExists', 'SB006'], ['MessageTooLarge', 'SB007'], ['EntityNotFound', 'SB008'],
    ['InvalidOperation', 'SB010'], ['InvalidArgument', '22023'], ['NullArgument', '22004'],
    ['PermissionDenied', '42501'], ['OutOfLocks', '53200'], ['ReadOnly', '25006'],
    ['QuotaExceeded', '54000'], ['NotSupported', '0A000'],
];

const classes = { SbqError };
const bySqlstate = {};
for (const [name, sqlstate] of TABLE) {
    // a named class per SQLSTATE, so that `instanceof` and err.name work
    const cls = { [name]: class extends SbqError {} }[name];
    cls.sqlstate = sqlstate;
    classes[name] = cls;
    bySqlstate[sqlstate] = cls;
}

// The typed error for a pg error, or the error itself when sbqueue has none for it.
function translate(err) {
    const cls = err && bySqlstate[err.code];
    return cls ? new cls(err.message, err.code, err) : err;
}

module.exports = { ...classes, translate, bySqlstate };
