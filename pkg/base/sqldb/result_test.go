package sqldb

import (
	"database/sql"
	"errors"
	"testing"
)

type rows int64

func (rows) LastInsertId() (int64, error) { return 0, nil }
func (n rows) RowsAffected() (int64, error) {
	if n < 0 {
		return 0, errors.New("no count")
	}
	return int64(n), nil
}

func TestChanged(t *testing.T) {
	if ok, err := Changed(rows(1), nil, "x %d", 1); !ok || err != nil {
		t.Errorf("one row: %v, %v", ok, err)
	}
	if ok, err := Changed(rows(0), nil, "x %d", 1); ok || err != nil {
		t.Errorf("no row: %v, %v", ok, err)
	}
	boom := errors.New("boom")
	if ok, err := Changed(nil, boom, "hold %d of %s", 2, "SKU-1"); ok || !errors.Is(err, boom) || err.Error() != "hold 2 of SKU-1: boom" {
		t.Errorf("statement error: %v, %v", ok, err)
	}
	if ok, err := Changed(rows(-1), nil, "x"); ok || err == nil || err.Error() != "x: no count" {
		t.Errorf("rows affected error: %v, %v", ok, err)
	}
}

func TestNoRowsAs(t *testing.T) {
	notFound := errors.New("not found")
	if err := NoRowsAs(sql.ErrNoRows, notFound, "get %d", 7); err != notFound {
		t.Errorf("no rows: %v, want the sentinel itself", err)
	}
	boom := errors.New("boom")
	if err := NoRowsAs(boom, notFound, "get %d", 7); !errors.Is(err, boom) || err.Error() != "get 7: boom" {
		t.Errorf("other error: %v", err)
	}
	if err := NoRowsAs(boom, notFound, "get by key"); err.Error() != "get by key: boom" {
		t.Errorf("no args: %v", err)
	}
}
