package storage

import (
	"errors"
	"strings"
	"testing"
)

// The read helpers every layer uses for its singletons: a missing key reads
// as 0 (GetU64) or ErrNotFound (GetCopy), a value of the wrong length is an
// error naming the key rather than a silently truncated number, and GetCopy's
// result stays valid after the store moves on.
func TestReadHelpers(t *testing.T) {
	db, err := Open(t.TempDir(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()

	if v, err := GetU64(db, []byte("absent")); err != nil || v != 0 {
		t.Fatalf("GetU64(absent) = %d, %v; want 0, nil", v, err)
	}
	if _, err := GetCopy(db, []byte("absent")); !errors.Is(err, ErrNotFound) {
		t.Fatalf("GetCopy(absent) error = %v; want ErrNotFound", err)
	}

	b := db.NewBatch()
	if err := SetU64(b, []byte("n"), 1<<40+7); err != nil {
		t.Fatal(err)
	}
	if err := b.Set([]byte("short"), []byte{1, 2, 3}, nil); err != nil {
		t.Fatal(err)
	}
	if err := b.Commit(nil); err != nil {
		t.Fatal(err)
	}
	if v, err := GetU64(db, []byte("n")); err != nil || v != 1<<40+7 {
		t.Fatalf("GetU64(n) = %d, %v; want %d", v, err, uint64(1<<40+7))
	}
	if _, err := GetU64(db, []byte("short")); err == nil || !strings.Contains(err.Error(), `corrupt uint64 at "short"`) {
		t.Fatalf("GetU64(short) error = %v; want a corrupt-value error naming the key", err)
	}

	got, err := GetCopy(db, []byte("n"))
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Set([]byte("n"), U64(9), nil); err != nil {
		t.Fatal(err)
	}
	if string(got) != string(U64(1<<40+7)) {
		t.Fatalf("GetCopy's result changed after a later write: %x", got)
	}
}
