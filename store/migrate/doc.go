// Package migrate moves an installation from its SQLite file to a
// PostgreSQL database (edgerelay migrate-store): every row of every table
// that holds state, ids and keys as they are, then the target's identity
// sequences past every id the source ever gave.
//
// It works below the relay, on the two stores' tables, because it copies
// rows rather than deciding anything: it reads SQLite with SQL (one
// read-only snapshot) and writes PostgreSQL with pgx (CopyFrom into a
// temporary table, then INSERT … ON CONFLICT on each table's key, one
// transaction per batch). Both schemas are the same numbered migrations, so
// the copy is generic over columns; the plan (plan.go) names every table
// of schema.sql and says whether it is moved and why. It must never write
// the source, and never print the target's password.
package migrate
