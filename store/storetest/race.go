//go:build race

package storetest

// raceEnabled: under the race detector a store's reads cost 10 to 20 times
// more (SQLite's C, translated to Go, is instrumented too), so the
// randomized and concurrent tests do a third of their work there (see
// work): the detector needs the goroutines to meet, not the volume, which
// the run without it checks.
const raceEnabled = true
