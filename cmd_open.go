package main

import (
	"github.com/urfave/cli/v2"

	"github.com/edgerelay/edgerelay/store"
	"github.com/edgerelay/edgerelay/store/open"
)

// openExistingStore opens the existing database's store alone, with the
// settings it read, for a command that only reads or keeps records (tokens,
// rejected rows, the status) and asks nothing of the relay: no routes, no
// relay over it. readOnly is as for openExistingFor.
func openExistingStore(c *cli.Context, readOnly bool) (store.Store, *settings, error) {
	s, err := loadSettings(c, c.App.ErrWriter)
	if err != nil {
		return nil, nil, err
	}
	if err := dbExists(s.flags.DB); err != nil {
		return nil, nil, err
	}
	st, err := open.Store(c.Context, s.flags.DB, open.Options{Logger: s.opts.Logger, ReadOnly: readOnly})
	return st, s, err
}
