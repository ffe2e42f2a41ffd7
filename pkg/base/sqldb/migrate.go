package sqldb

import (
	"context"
	"fmt"
	"io/fs"
	"log/slog"

	"github.com/jmoiron/sqlx"
	"github.com/pressly/goose/v3"
)

// Migrate applies every pending goose migration in fsys. Several instances of
// a service may start at once: a named lock (GET_LOCK) held on one connection
// makes them apply the migrations one after the other.
func Migrate(ctx context.Context, db *sqlx.DB, fsys fs.FS, log *slog.Logger) error {
	conn, err := db.Connx(ctx)
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	defer conn.Close()
	var got int
	const lock = "SELECT COALESCE(GET_LOCK(CONCAT('goose:', DATABASE()), 60), 0)"
	if err := conn.QueryRowxContext(ctx, lock).Scan(&got); err != nil || got != 1 {
		return fmt.Errorf("migrate: take migration lock (got %d): %v", got, err)
	}
	defer conn.ExecContext(context.WithoutCancel(ctx), "DO RELEASE_LOCK(CONCAT('goose:', DATABASE()))")

	p, err := goose.NewProvider(goose.DialectMySQL, db.DB, fsys,
		goose.WithDisableGlobalRegistry(true),
		// The shared messaging tables (migrations/common) are numbered below
		// the service's own; a new shared table must still apply to services
		// that already ran their own later migrations.
		goose.WithAllowOutofOrder(true),
	)
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	results, err := p.Up(ctx)
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	for _, r := range results {
		if log != nil {
			log.Info("migration applied", "version", r.Source.Version, "file", r.Source.Path, "took", r.Duration)
		}
	}
	return nil
}
