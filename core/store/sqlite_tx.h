// The run store's SQLite plumbing shared by its writers: one error message shape for every failed
// call, and one write transaction (BEGIN IMMEDIATE, the body, COMMIT) that leaves nothing behind
// when any part fails. IMMEDIATE takes the write lock at BEGIN, so a busy database fails there,
// before the body has done any work, instead of at the body's first write.
// Not here: savepoints or nested transactions (no caller needs them), retries beyond the
// connection's busy timeout.
#pragma once
#include <functional>
#include <string>

#include "kernels/base/result.h"

struct sqlite3;

namespace ftx {

// "PATH: what: sqlite message", or "PATH: not a database ..." for a corrupt or foreign file. Read
// it before a ROLLBACK, which resets the connection's message.
Error sqlite_error(sqlite3* db, const std::string& path, const std::string& what);

// Runs body() between BEGIN IMMEDIATE and COMMIT. When BEGIN, the body or COMMIT fails, whatever
// the body wrote is rolled back and the first error comes back (the body's own, or BEGIN's or
// COMMIT's as "PATH: what: sqlite message"); the body does not run when BEGIN fails.
Status in_transaction(sqlite3* db, const std::string& path, const std::string& what,
                      const std::function<Status()>& body);

}  // namespace ftx
