package sqldb

import (
	"context"
	"database/sql/driver"
	"errors"
	"net"

	"github.com/go-sql-driver/mysql"
)

// MySQL server error numbers that callers must tell apart.
const (
	ErDupEntry          = 1062 // duplicate key
	ErLockWaitTimeout   = 1205 // rolls back the statement only, not the transaction
	ErLockDeadlock      = 1213 // rolls back the whole transaction
	ErQueryInterrupted  = 1317
	ErConnectionKilled  = 1927 // MariaDB: the statement's session was killed (KILL CONNECTION)
	ErServerShutdown    = 1053
	ErTooManyConns      = 1040
	ErReadOnly          = 1290 // e.g. during a failover
	ErDataTooLong       = 1406
	ErNoSuchTable       = 1146
	ErUnknownDatabase   = 1049
	ErAccessDenied      = 1045
	ErTableAccessDenied = 1142
)

// MySQLErrorNumber returns the server error number in err, or 0.
func MySQLErrorNumber(err error) uint16 {
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		return me.Number
	}
	return 0
}

// IsDuplicateKey reports a duplicate key error. Callers decide which key it
// was by running the statement that can only collide on the key they mean.
func IsDuplicateKey(err error) bool { return MySQLErrorNumber(err) == ErDupEntry }

// IsTransient reports errors worth retrying later with the same input: lock
// conflicts, lost connections, a server going away or refusing connections.
// Everything else (syntax, constraint, data too long) will fail again.
func IsTransient(err error) bool {
	if err == nil {
		return false
	}
	switch MySQLErrorNumber(err) {
	case ErLockWaitTimeout, ErLockDeadlock, ErQueryInterrupted, ErConnectionKilled, ErServerShutdown, ErTooManyConns, ErReadOnly:
		return true
	case 0:
	default:
		return false
	}
	if errors.Is(err, driver.ErrBadConn) || errors.Is(err, mysql.ErrInvalidConn) ||
		errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne)
}
