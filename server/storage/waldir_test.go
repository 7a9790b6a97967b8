package storage

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2"
)

func walFiles(t *testing.T, dir string) int {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".log") {
			n++
		}
	}
	return n
}

// The write-ahead log goes to WALDir when one is given. Starting with
// another WAL directory than last time (given, changed or dropped) recovers
// what only the old directory's log holds, says so, and logs here from then
// on; nothing synced is lost on the way.
func TestWALDirAndMovingIt(t *testing.T) {
	dir, walA, walB := t.TempDir(), filepath.Join(t.TempDir(), "wal-a"), filepath.Join(t.TempDir(), "wal-b")
	var moves []string
	open := func(walDir string) *pebble.DB {
		t.Helper()
		db, err := Open(dir, Options{WALDir: walDir, OnWALMoved: func(from, to string) { moves = append(moves, from+" -> "+to) }})
		if err != nil {
			t.Fatalf("open with WAL dir %q: %v", walDir, err)
		}
		return db
	}
	// Close does not flush the memtable: the values below live only in the
	// log until a later flush, which is what each reopen must recover.
	put := func(db *pebble.DB, k string) {
		t.Helper()
		if err := db.Set([]byte(k), []byte("v"), pebble.Sync); err != nil {
			t.Fatal(err)
		}
	}
	has := func(db *pebble.DB, keys ...string) {
		t.Helper()
		for _, k := range keys {
			v, c, err := db.Get([]byte(k))
			if err != nil {
				t.Fatalf("%s lost: %v", k, err)
			}
			if string(v) != "v" {
				t.Fatalf("%s = %q", k, v)
			}
			c.Close()
		}
	}

	db := open("")
	put(db, "in-store-dir")
	db.Close()

	db = open(walA)
	has(db, "in-store-dir")
	put(db, "in-wal-a")
	if walFiles(t, walA) == 0 {
		t.Fatalf("no log file in the WAL dir %s", walA)
	}
	db.Close()
	if len(moves) != 1 || moves[0] != filepath.Join(dir, "db")+" -> "+walA {
		t.Fatalf("moves %q, want the store dir to %s", moves, walA)
	}

	db = open(walA) // same place: no move
	has(db, "in-store-dir", "in-wal-a")
	db.Close()
	if len(moves) != 1 {
		t.Fatalf("reopening with the same WAL dir reported a move: %q", moves)
	}

	db = open(walB)
	has(db, "in-store-dir", "in-wal-a")
	put(db, "in-wal-b")
	db.Close()

	db = open("") // back into the store dir
	has(db, "in-store-dir", "in-wal-a", "in-wal-b")
	db.Close()
	if len(moves) != 3 || moves[2] != walB+" -> "+filepath.Join(dir, "db") {
		t.Fatalf("moves %q", moves)
	}
}
