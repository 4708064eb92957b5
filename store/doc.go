// Package store names what the relay needs of its storage (the Store
// interface, in the relay's words) and the values that cross that boundary.
// It holds no implementation: store/sqlite is the default (one file, one
// writer goroutine, group commit), and store/storetest is the conformance
// suite every implementation passes.
//
// The relay decides and the store records: no policy lives behind this
// interface, only durable, fenced, deduplicated writes and the reads that
// explain them.
package store
