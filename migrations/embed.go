// Package migrations holds every service's goose migrations, embedded in the
// binaries and applied at service start.
//
// common/ holds the messaging tables of the chapter (outbox_events,
// consumer_inbox, dead letters) that pkg/outbox and pkg/inbox need in every
// service's schema; each service folder holds that service's own tables.
// Shared files are numbered 1-99, service files from 100, so For can merge
// the two folders into one goose source without version clashes.
package migrations

import (
	"embed"
	"fmt"
	"io/fs"
	"path"
	"testing/fstest"
)

//go:embed common/*.sql order/*.sql inventory/*.sql payment/*.sql
var files embed.FS

// Services are the folders For accepts.
var Services = []string{"order", "inventory", "payment"}

// For returns the migrations of one service: the shared messaging tables
// followed by the service's own.
func For(service string) (fs.FS, error) {
	merged := fstest.MapFS{}
	for _, dir := range []string{"common", service} {
		entries, err := fs.ReadDir(files, dir)
		if err != nil {
			return nil, fmt.Errorf("migrations for %q: %w", service, err)
		}
		for _, e := range entries {
			data, err := fs.ReadFile(files, path.Join(dir, e.Name()))
			if err != nil {
				return nil, err
			}
			if _, dup := merged[e.Name()]; dup {
				return nil, fmt.Errorf("migrations: %s appears twice", e.Name())
			}
			merged[e.Name()] = &fstest.MapFile{Data: data}
		}
	}
	return merged, nil
}
