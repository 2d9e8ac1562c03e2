package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/zap"
)

// TestLogFileKeepsEveryLine: the --log-file debug log is not sampled; a
// run's hundreds of "api request" lines within a second all reach it
// (zap's production config would keep the first 100 and then one in 100).
func TestLogFileKeepsEveryLine(t *testing.T) {
	path := filepath.Join(t.TempDir(), "maasctl.log")
	g := &globalOptions{logFile: path}
	log, sync, err := g.logger()
	if err != nil {
		t.Fatal(err)
	}
	const n = 500
	for i := range n {
		log.Debug("api request", zap.Int("i", i))
	}
	sync()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Count(string(b), `"msg":"api request"`); got != n {
		t.Errorf("%d of %d debug lines in the log file", got, n)
	}
}
