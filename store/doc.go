// Package store owns the SQLite file: the schema and its migrations, the one
// writer goroutine that makes every write, and the read-only pool.
//
// Nothing outside this package writes SQL. The store never decides policy
// (when to retry, what a provider's answer means): the relay decides and the
// store records, each write in a transaction answered only after it commits.
package store
