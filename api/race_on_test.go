//go:build race

package api_test

// raced: the race detector is on; SQLite in pure Go runs ten times slower
// under it, so waits that bound "at once" are longer.
const raced = true
