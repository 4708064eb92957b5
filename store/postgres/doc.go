// Package postgres is the store.Store on PostgreSQL, through pgx's pool:
// its schema and numbered migrations (in the same numbering as
// store/sqlite's), and PostgreSQL's own SQL where it differs.
//
// The behaviour both stores share is written once in store/internal/sqlstore
// and runs here over the pool or a pgx transaction (shared). Where
// store/sqlite relies on its one writer goroutine, this store relies on
// PostgreSQL: unique constraints with ON CONFLICT for every dedupe, row
// locks with FOR UPDATE SKIP LOCKED for claims, the claim's fence token in
// every settlement, a counter row per tenant for its feed item sequence (so
// items commit in sequence order), and an advisory lock that lets a reader
// page notifications by id without skipping one still being committed.
// Each write is one transaction, answered only after its commit (checked
// when a commit's answer is lost); small writes share commits (group.go).
//
// Nothing outside the stores writes edgerelay's SQL. The store never
// decides policy: model's policy and the relay decide, the store records.
// It never prints its URL's password: Where and every error name the
// database without it.
package postgres
