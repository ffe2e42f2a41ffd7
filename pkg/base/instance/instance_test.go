package instance

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
)

func TestWithAndDefault(t *testing.T) {
	t.Parallel()
	if got := ID(context.Background()); got != "" {
		t.Errorf("ID of a bare context = %q, want empty", got)
	}
	if got := ID(With(context.Background(), "order-2")); got != "order-2" {
		t.Errorf("ID = %q, want order-2", got)
	}
	if d := Default(); !strings.HasSuffix(d, "-"+strconv.Itoa(os.Getpid())) {
		t.Errorf("Default() = %q, want host-pid", d)
	}
}
