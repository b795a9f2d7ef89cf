#include "core/store/sqlite_tx.h"

#include <sqlite3.h>

namespace ftx {

Error sqlite_error(sqlite3* db, const std::string& path, const std::string& what) {
  const int primary = sqlite3_extended_errcode(db) & 0xff;
  if (primary == SQLITE_NOTADB || primary == SQLITE_CORRUPT)
    return make_error(path + ": not a database (file is corrupt or not SQLite)");
  return make_error(path + ": " + what + ": " + sqlite3_errmsg(db));
}

Status in_transaction(sqlite3* db, const std::string& path, const std::string& what,
                      const std::function<Status()>& body) {
  if (sqlite3_exec(db, "BEGIN IMMEDIATE", nullptr, nullptr, nullptr) != SQLITE_OK) return sqlite_error(db, path, what);
  Status st = body();
  if (st.ok() && sqlite3_exec(db, "COMMIT", nullptr, nullptr, nullptr) != SQLITE_OK) st = sqlite_error(db, path, what);
  // A failed COMMIT may leave the transaction open (SQLITE_BUSY); ROLLBACK's own failure (no
  // transaction left to end) changes nothing.
  if (!st.ok() && !sqlite3_get_autocommit(db)) sqlite3_exec(db, "ROLLBACK", nullptr, nullptr, nullptr);
  return st;
}

}  // namespace ftx
