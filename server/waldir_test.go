package server

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tenure-io/tenure/test/logbuf"
)

// etcd's --wal-dir: the member's write-ahead log is written there, and a
// member restarted without it (or with another) recovers every write the
// log held and says where the log moved.
func TestWALDirHoldsTheLogAndMayMove(t *testing.T) {
	cfg := testMemberConfig(t)
	cfg.WALDir = filepath.Join(t.TempDir(), "wal")
	cfg.ApplyDefaults()
	var logs logbuf.Buffer
	run := func(c Config, key string, want ...string) {
		t.Helper()
		_, cli, stop := startLogged(t, c, &logs)
		defer stop()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := cli.Put(ctx, key, "v"); err != nil {
			t.Fatal(err)
		}
		for _, k := range want {
			r, err := cli.Get(ctx, k)
			if err != nil || len(r.Kvs) != 1 {
				t.Fatalf("%s after restart: %v %v", k, r, err)
			}
		}
	}
	run(cfg, "a")
	logsIn := func(dir string) bool {
		ents, _ := os.ReadDir(dir)
		for _, e := range ents {
			if strings.HasSuffix(e.Name(), ".log") {
				return true
			}
		}
		return false
	}
	if !logsIn(cfg.WALDir) {
		t.Fatalf("no write-ahead log file in --wal-dir %s", cfg.WALDir)
	}
	if strings.Contains(logs.String(), "write-ahead log moved") {
		t.Fatalf("a first start reported a move:\n%s", logs.String())
	}
	noWAL := cfg
	noWAL.WALDir = ""
	run(noWAL, "b", "a")
	if !strings.Contains(logs.String(), "write-ahead log moved") {
		t.Fatalf("the move back into the data dir was not logged:\n%s", logs.String())
	}
	run(cfg, "c", "a", "b")
}
