// Package sources reads outbox rows from another application's database
// and relays them: the transactional-outbox pattern, where the application
// writes its business row and an event row in one transaction of its own
// and edgerelay relays the events (edgerelay tail, and serve's tail: list).
//
// A Source reads rows in id order after a position and, if configured, marks
// them processed. Parse checks a source URL without reaching its database
// (a Spec, which is what a config keeps); Spec.Open connects and checks the
// table, and a Tailer made by NewTailerFor does that when it runs. The Tailer (tail.go) runs a source: it accepts each batch
// of rows through relay.AcceptAll and keeps its state (position and gaps)
// through the relay (SourceState, SaveSourceState).
//
// It never touches edgerelay's own database or holds a store (the relay
// keeps the position), never judges an event (the relay decodes,
// validates and dedupes), and never writes the application's database
// except the processed_at column, and only when asked to
// (mark_processed=true).
//
// This is the one package besides the stores that speaks SQL, and only to
// the application's database. One file per kind of database: sqlite.go,
// postgres.go and mysql.go (the last two share sqldb.go), each one line in
// openers. Which columns make a row's event (the event JSON in one column,
// or Debezium's id, type, aggregate and payload) is columns.go's, the same
// for all.
package sources
