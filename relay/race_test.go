package relay

import "runtime/debug"

// raceEnabled reports whether the test binary runs under the race
// detector (which slows SQLite, pure Go, tenfold and more).
func raceEnabled() bool {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return false
	}
	for _, s := range bi.Settings {
		if s.Key == "-race" {
			return s.Value == "true"
		}
	}
	return false
}
