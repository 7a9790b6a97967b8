//go:build linux

package storage

import (
	"github.com/cockroachdb/pebble/v2/vfs"
	"golang.org/x/sys/unix"
)

// preallocateExtend is fallocate with mode 0: the blocks are reserved and
// the file size covers them.
func preallocateExtend(f vfs.File, offset, length int64) error {
	fd := f.Fd()
	if fd == vfs.InvalidFd {
		return f.Preallocate(offset, length)
	}
	for {
		err := unix.Fallocate(int(fd), 0, offset, length)
		if err != unix.EINTR {
			return err
		}
	}
}
