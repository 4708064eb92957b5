// Package config reads, checks and compares edgerelay's YAML config file.
//
// Load decodes a file and validates it completely: unknown keys and values
// of the wrong kind (yaml.go), then values, names and cross-references
// (check.go, categories.go), every problem reported with its line and key
// path in one *Error. Check also opens each tail: source. Build makes the
// routes' providers, RelayOptions the relay's options, and reload.go says
// what a reload changes and what needs a restart.
//
// It owns the file's terms, not the command line: flags, and how they
// override keys, are package main's. It never opens the relay's database.
package config
