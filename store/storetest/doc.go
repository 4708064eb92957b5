// Package storetest is the conformance suite of model.Store: every
// behaviour the relay relies on, stated as a test that any implementation
// runs with Run (the way River runs riverdrivertest against every driver).
//
// The suite states behaviours through the interface only: it never reads a
// table, never assumes a dialect, and gives every time explicitly (no
// sleeps, no wall clock). What is one store's own (SQLite's writer, its
// query plans, its migrations) is tested beside that store. A store's
// test runs it with a new store per subtest:
//
//	func TestConformance(t *testing.T) {
//		storetest.Run(t, func(t *testing.T) model.Store {
//			s, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "relay.db"), sqlite.Options{})
//			if err != nil {
//				t.Fatal(err)
//			}
//			return s
//		})
//	}
//
// Run runs every group, Dispatch and Quarantine included (they can also be
// run alone). Setup outside Dispatch that needs a notification in a given
// state goes through Dispatch in one place, settleAll.
//
// The feeds' randomized model run logs its seed: EDGERELAY_FEED_MODEL_SEED
// replays one, EDGERELAY_FEED_MODEL_STEPS runs longer (120 steps by
// default, a third of that under -race, as for the concurrent tests).
package storetest
