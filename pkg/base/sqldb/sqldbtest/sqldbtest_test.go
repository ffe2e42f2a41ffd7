package sqldbtest

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
)

// TestCopyIsTheMigratedSchema: a test database built by New has exactly the
// tables and rows of one the service's migrations made, and a service
// starting on it (which migrates) finds nothing left to apply.
func TestCopyIsTheMigratedSchema(t *testing.T) {
	t.Parallel()
	for _, service := range []string{"order", "inventory", "payment"} {
		t.Run(service, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			copied := New(t, service)
			migrated := migratedDatabase(t, ctx, service)

			want, err := readSchema(ctx, migrated)
			if err != nil {
				t.Fatal(err)
			}
			if len(want.creates) < 5 || len(want.rows) < 1 {
				t.Fatalf("the migrated %s schema has %d tables and %d tables with rows: not a service's schema", service, len(want.creates), len(want.rows))
			}
			if err := migrate(ctx, copied.DB, service); err != nil {
				t.Fatalf("the service's migrations on the copy: %v", err)
			}
			got, err := readSchema(ctx, copied.DB)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got.creates, want.creates) {
				t.Errorf("tables differ:\ncopy:     %q\nmigrated: %q", got.creates, want.creates)
			}
			if g, w := withoutApplyTimes(got.rows), withoutApplyTimes(want.rows); !reflect.DeepEqual(g, w) {
				t.Errorf("rows differ:\ncopy:     %v\nmigrated: %v", g, w)
			}
		})
	}
}

func migratedDatabase(t *testing.T, ctx context.Context, service string) *sqlx.DB {
	db, name, err := createDatabase(ctx, service)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = db.ExecContext(context.Background(), "DROP DATABASE IF EXISTS `"+name+"`")
		db.Close()
	})
	if err := migrate(ctx, db, service); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	return db
}

// withoutApplyTimes blanks the times the migrations wrote (when goose
// applied each one, a seed row's updated_at): the values a copy keeps from
// the process's first database.
func withoutApplyTimes(rows []tableRows) []tableRows {
	for _, r := range rows {
		for _, v := range r.values {
			for i := range v {
				if _, ok := v[i].(time.Time); ok {
					v[i] = nil
				}
			}
		}
	}
	return rows
}
