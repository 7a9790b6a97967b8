package cluster

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// socketOwner finds which of pids owns the dialing end of an accepted
// loopback connection c: the dialer's local port is c's remote port, so its
// socket inode is in /proc/net/tcp{,6}, and the owner has that inode open.
// Returns -1 when unknown.
func socketOwner(c net.Conn, pids map[int]int) int {
	ra, ok := c.RemoteAddr().(*net.TCPAddr)
	if !ok {
		return -1
	}
	la, ok := c.LocalAddr().(*net.TCPAddr)
	if !ok {
		return -1
	}
	inode := ""
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		if inode = findInode(f, ra.Port, la.Port); inode != "" {
			break
		}
	}
	if inode == "" {
		return -1
	}
	want := "socket:[" + inode + "]"
	for pid, idx := range pids {
		fds, _ := filepath.Glob(fmt.Sprintf("/proc/%d/fd/*", pid))
		for _, fd := range fds {
			if l, err := os.Readlink(fd); err == nil && l == want {
				return idx
			}
		}
	}
	return -1
}

// findInode returns the inode of the socket whose local port is lport and
// remote port is rport.
func findInode(file string, lport, rport int) string {
	f, err := os.Open(file)
	if err != nil {
		return ""
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	s.Scan() // header
	for s.Scan() {
		fs := strings.Fields(s.Text())
		if len(fs) < 10 {
			continue
		}
		if port(fs[1]) == lport && port(fs[2]) == rport {
			return fs[9]
		}
	}
	return ""
}

func port(hexAddr string) int {
	i := strings.LastIndexByte(hexAddr, ':')
	if i < 0 {
		return -1
	}
	p, err := strconv.ParseUint(hexAddr[i+1:], 16, 32)
	if err != nil {
		return -1
	}
	return int(p)
}

// AllThreadsStopped reports whether every thread of pid is in state T
// (stopped) according to /proc.
func AllThreadsStopped(pid int) bool {
	stats, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/stat", pid))
	if len(stats) == 0 {
		return false
	}
	for _, f := range stats {
		b, err := os.ReadFile(f)
		if err != nil {
			return false
		}
		// pid (comm) S ...: the state follows the last ')'.
		s := string(b)
		j := strings.LastIndexByte(s, ')')
		if j < 0 || j+2 >= len(s) || (s[j+2] != 'T' && s[j+2] != 't') {
			return false
		}
	}
	return true
}
