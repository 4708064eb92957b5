// Package sqlstore is the store's behaviour written once over SQL, for
// both drivers: the feed view, the migration loader, the scans and the
// encodings that store/sqlite and store/postgres would otherwise each
// write in their own dialect.
//
// It reaches a database only through Querier, which a driver satisfies
// with a read transaction, its pool or a write transaction of its own
// making; it never opens, begins or commits anything, so each driver keeps
// what is its own (SQLite's single writer and group commit, PostgreSQL's
// pool, SKIP LOCKED claims and commit-status checks).
//
// Its SQL is written once, with $N placeholders, which both PostgreSQL and
// modernc.org/sqlite bind by number. Where the dialects differ (SQLite's
// index hints, PostgreSQL's arrays), the query is a field of Dialect and
// each driver fills in its own.
package sqlstore
