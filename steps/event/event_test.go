package event

import "testing"

// TestRequestsText: the run's last line counts requests in words that
// agree with the number ("1 write", not "1 writes").
func TestRequestsText(t *testing.T) {
	for _, tt := range []struct {
		s    Summary
		want string
	}{
		{Summary{Reads: 43}, "43 reads, 0 writes to managed objects"},
		{Summary{Reads: 1, Writes: 1}, "1 read, 1 write to managed objects"},
		{Summary{Reads: 40, Shared: 83, Writes: 2}, "40 reads (83 more answered from the run's earlier reads), 2 writes to managed objects"},
	} {
		if got := tt.s.RequestsText(); got != tt.want {
			t.Errorf("RequestsText(%+v) = %q, want %q", tt.s, got, tt.want)
		}
	}
}
