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

// ExecIn is ExecContext for a statement with an IN (?) list, expanded as
// SelectIn does.
func ExecIn(ctx context.Context, db sqlx.ExecerContext, query string, args ...any) (sql.Result, error) {
	query, args, err := sqlx.In(query, args...)
	if err != nil {
		return nil, err
	}
	return db.ExecContext(ctx, query, args...)
}
