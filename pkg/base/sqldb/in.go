package sqldb

import (
	"context"
	"database/sql"

	"github.com/jmoiron/sqlx"
)

// SelectIn is sqlx.SelectContext for a query with an IN (?) list: a slice
// among args stands for as many placeholders as it has elements (sqlx.In),
// so one statement reads the rows of a whole batch. The slice must not be
// empty.
func SelectIn(ctx context.Context, db sqlx.QueryerContext, dest any, query string, args ...any) error {
	query, args, err := sqlx.In(query, args...)
	if err != nil {
		return err
	}
	return sqlx.SelectContext(ctx, db, dest, query, args...)
}

// SelectInMap is SelectIn into a map: query's rows (of type R) by key, each
// as entry makes it (its key and value): the rows of a batch by their ids.
func SelectInMap[R any, K comparable, V any](ctx context.Context, db sqlx.QueryerContext, entry func(R) (K, V),
	query string, args ...any) (map[K]V, error) {
	var rows []R
	if err := SelectIn(ctx, db, &rows, query, args...); err != nil {
		return nil, err
	}
	out := make(map[K]V, len(rows))
	for _, r := range rows {
		k, v := entry(r)
		out[k] = v
	}
	return out, nil
}

// ExecIn is ExecContext for a statement with an IN (?) list, expanded as
// SelectIn does.
func ExecIn(ctx context.Context, db sqlx.ExecerContext, query string, args ...any) (sql.Result, error) {
	query, args, err := sqlx.In(query, args...)
	if err != nil {
		return nil, err
	}
	return db.ExecContext(ctx, query, args...)
}
