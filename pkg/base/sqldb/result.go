package sqldb

import (
	"database/sql"
	"errors"
	"fmt"
)

// Changed turns the result of a one-row conditional UPDATE (or INSERT) into
// "did the row change": the caller's compare-and-set learns from rows
// affected whether it happened. An error, from the statement or from rows
// affected, comes back wrapped with what was tried (format and args).
func Changed(res sql.Result, err error, format string, args ...any) (bool, error) {
	if err == nil {
		var n int64
		if n, err = res.RowsAffected(); err == nil {
			return n == 1, nil
		}
	}
	return false, fmt.Errorf(format+": %w", append(args, err)...)
}

// NoRowsAs maps the error of a one-row read: sql.ErrNoRows becomes notFound
// (the caller's domain error, returned as it is), anything else comes back
// wrapped with what was tried (format and args).
func NoRowsAs(err, notFound error, format string, args ...any) error {
	if errors.Is(err, sql.ErrNoRows) {
		return notFound
	}
	return fmt.Errorf(format+": %w", append(args, err)...)
}
