// Package model holds the values every layer of edgerelay passes around:
// events, notifications and their attempts, statuses, feeds, suppressions,
// request keys, tokens and sessions, and the errors callers branch on.
// It has no behaviour beyond describing and comparing them, and imports
// nothing of edgerelay, so the relay, the stores, the API, the console and
// the commands can all name the same types without importing each other
// (as rivertype is to River).
package model
