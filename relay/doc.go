// Package relay owns the life of a notification: accepting an event,
// fanning it out to its recipients, claiming what is due, calling the
// provider and deciding what its answer means (sent, retry, failed, dead,
// unknown).
//
// It never writes SQL (the store does) and never speaks a provider's wire
// format (the providers do). The whole delivery policy is the function
// decide in policy.go.
package relay
