// Package sources reads outbox rows from another application's database:
// the transactional-outbox pattern, where the application writes its
// business row and an event row in one transaction of its own and edgerelay
// relays the events (edgerelay tail, relay.Tailer).
//
// A Source reads rows in id order after a position and, if configured, marks
// them processed. It never touches edgerelay's own database (the store owns
// that, and the position is kept there), never decodes or judges an event
// (the relay does), and never writes the application's database except the
// processed_at column, and only when asked to (mark_processed=true).
//
// This is the one package besides store that speaks SQL, and only to the
// application's database. One file per kind of database: sqlite.go now; a
// PostgreSQL or MySQL source is one more file and one line in openers.
package sources
