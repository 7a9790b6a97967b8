package storage

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2"
)

// The WAL's size covers its preallocated space (so synced appends do not
// move the size), and a copy of the directory taken while the store is open
// — a crash image, with zeros after the last record — opens with every
// synced write in it. The size check is what fails without walExtendFS; the
// recovery check guards the risk the wrapper brings (a zero tail in the
// live log) and passes with Pebble's default too.
func TestWALPreallocationExtendsSize(t *testing.T) {
	dir := t.TempDir()
	db, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	const n = 100
	written := 0
	for i := 0; i < n; i++ {
		k, v := []byte(fmt.Sprintf("k%03d", i)), []byte(strings.Repeat("v", 100))
		written += len(k) + len(v)
		if err := db.Set(k, v, pebble.Sync); err != nil {
			t.Fatal(err)
		}
	}

	if runtime.GOOS == "linux" {
		logs, _ := filepath.Glob(filepath.Join(dir, "db", "*.log"))
		if len(logs) == 0 {
			t.Fatal("no WAL file in the store")
		}
		var largest int64
		for _, l := range logs {
			if fi, err := os.Stat(l); err == nil && fi.Size() > largest {
				largest = fi.Size()
			}
		}
		// Pebble preallocates 110% of the memtable size (32 MiB); with
		// FALLOC_FL_KEEP_SIZE the size would only cover the ~11 KB written.
		if largest < 1<<20 {
			t.Fatalf("largest WAL file is %d bytes after writing %d bytes; want its preallocated size (>= 1 MiB)", largest, written)
		}
	}

	crash := t.TempDir()
	copyDir(t, filepath.Join(dir, "db"), filepath.Join(crash, "db"))
	db2, err := Open(crash, Options{})
	if err != nil {
		t.Fatalf("open a crash image of the store: %v", err)
	}
	defer db2.Close()
	for i := 0; i < n; i++ {
		k := []byte(fmt.Sprintf("k%03d", i))
		v, closer, err := db2.Get(k)
		if err != nil {
			t.Fatalf("synced key %s missing after recovery: %v", k, err)
		}
		if len(v) != 100 {
			t.Fatalf("key %s: %d-byte value, want 100", k, len(v))
		}
		closer.Close()
	}
}

func copyDir(t *testing.T, from, to string) {
	t.Helper()
	if err := os.MkdirAll(to, 0o700); err != nil {
		t.Fatal(err)
	}
	ents, err := os.ReadDir(from)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if e.IsDir() || e.Name() == "LOCK" {
			continue
		}
		src, err := os.Open(filepath.Join(from, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		dst, err := os.Create(filepath.Join(to, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.Copy(dst, src); err != nil {
			t.Fatal(err)
		}
		src.Close()
		dst.Close()
	}
}
