package deploy

import (
	"context"
	"database/sql"
	"fmt"
	"os/exec"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/relmsg/ordersaga/pkg/base/sqldb"
)

// Least privilege, checked on the real server: scripts/up.sh setup creates
// the three schemas and one user per service with deploy/provision.sh's SQL
// (the SQL docker compose runs too, as TestMySQLInitScript and
// TestLocalSetupRunsTheSameProvisioning check). Each user can work in its
// own schema and cannot read another service's schema or create schemas.
func TestServiceUsersCannotReadOtherSchemas(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test: needs MariaDB/MySQL and RabbitMQ (run without -short)")
	}
	cmd := exec.Command("bash", "scripts/up.sh", "setup")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("scripts/up.sh setup: %v\n%s", err, out)
	}
	example := loadEnvExample(t)
	users := []struct{ key, db string }{
		{"ORDER", "order_service"}, {"INVENTORY", "inventory_service"}, {"PAYMENT", "payment_service"},
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, u := range users {
		cfg := mysql.NewConfig()
		cfg.User, cfg.Passwd = example[u.key+"_DB_USER"], example[u.key+"_DB_PASSWORD"]
		cfg.Net, cfg.Addr, cfg.DBName = "tcp", "127.0.0.1:3306", u.db
		db, err := sql.Open("mysql", cfg.FormatDSN())
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		probe := fmt.Sprintf("grants_probe_%d", time.Now().UnixNano())
		if _, err := db.ExecContext(ctx, "CREATE TABLE "+probe+" (id INT PRIMARY KEY)"); err != nil {
			t.Fatalf("%s cannot create a table in its own schema %s: %v", cfg.User, u.db, err)
		}
		if _, err := db.ExecContext(ctx, "DROP TABLE "+probe); err != nil {
			t.Fatalf("%s: drop probe: %v", cfg.User, err)
		}
		for _, other := range users {
			if other.db == u.db {
				continue
			}
			_, err := db.ExecContext(ctx, "CREATE TABLE `"+other.db+"`.`"+probe+"` (id INT PRIMARY KEY)")
			if n := sqldb.MySQLErrorNumber(err); n != 1142 && n != 1044 {
				t.Errorf("%s creating a table in %s: err = %v, want access denied (1142/1044)", cfg.User, other.db, err)
			}
			var x int
			err = db.QueryRowContext(ctx, "SELECT COUNT(*) FROM `"+other.db+"`.outbox_events").Scan(&x)
			if n := sqldb.MySQLErrorNumber(err); n != 1142 && n != 1044 {
				t.Errorf("%s reading %s.outbox_events: err = %v, want access denied (1142/1044)", cfg.User, other.db, err)
			}
		}
		_, err = db.ExecContext(ctx, "CREATE DATABASE "+probe)
		if n := sqldb.MySQLErrorNumber(err); n != 1044 {
			t.Errorf("%s creating a database: err = %v, want access denied (1044)", cfg.User, err)
		}
	}
}
