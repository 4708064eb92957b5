// Package sqlite is the default model.Store: one SQLite file, its schema and
// numbered migrations, the one writer goroutine that makes every write (each
// queued write in its own savepoint of one group-committed transaction), and
// a read-only pool.
//
// Nothing outside this package and the other stores writes edgerelay's
// SQL. The store never decides policy (when to retry, what a provider's
// answer means): the relay decides and the store records, each write
// answered only after it commits.
package sqlite
