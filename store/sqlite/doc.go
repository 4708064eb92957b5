// Package sqlite is the default store.Store: one SQLite file, its schema and
// numbered migrations, the one writer goroutine that makes every write (each
// queued write in its own savepoint of one group-committed transaction), and
// a read-only pool.
//
// The behaviour both stores share is written once in store/internal/sqlstore
// and runs here over the writer's transaction (Tx.shared) or the read pool
// (reader); this package keeps what is SQLite's own: the writer, group
// commit, the pragmas, the fresh-file migration lock, its index hints and
// its queries where SQLite's SQL differs (sqlstore.Dialect).
//
// Nothing outside the stores writes edgerelay's SQL. The store never
// decides policy (when to retry, how receipts rank: model's policy does):
// it records, each write answered only after it commits.
package sqlite
