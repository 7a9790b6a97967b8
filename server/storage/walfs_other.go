//go:build !linux

package storage

import "github.com/cockroachdb/pebble/v2/vfs"

// preallocateExtend falls back to Pebble's own preallocation off Linux.
func preallocateExtend(f vfs.File, offset, length int64) error {
	return f.Preallocate(offset, length)
}
