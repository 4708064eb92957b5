// Package store names what the relay needs of its storage: the Store
// interface, cut into the roles (Events, Dispatch, Feeds, …) that each part
// of the relay takes. The values that cross the boundary live in package
// model, which every layer imports. It holds no implementation:
// store/sqlite is the default (one file, one writer goroutine, group
// commit), store/postgres runs several nodes on one database, and
// store/storetest is the conformance suite both pass.
//
// The relay decides and the store records: no policy lives behind this
// interface, only durable, fenced, deduplicated writes and the reads that
// explain them.
package store
