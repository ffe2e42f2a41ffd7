package wrongway

import "testing"

func TestParse(t *testing.T) {
	tests := []struct {
		spec    string
		want    string
		wantErr bool
	}{
		{"", "", false},
		{"no-inbox", "no-inbox", false},
		{" ack-before-commit , no-inbox ", "ack-before-commit,no-inbox", false},
		{"no-inbox,typo", "no-inbox", true},
	}
	for _, tt := range tests {
		on, err := Parse(tt.spec)
		got := NewSet(on)
		if (err != nil) != tt.wantErr || got.String() != tt.want {
			t.Errorf("Parse(%q) = %q, %v; want %q, error %v", tt.spec, got, err, tt.want, tt.wantErr)
		}
	}
	var none *Set
	if none.On(NoInbox) || NewSet(nil).On(NoInbox) {
		t.Fatal("empty set has a switch on")
	}
}
