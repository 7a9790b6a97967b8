// Package machine describes the host a benchmark ran on.
package machine

import (
	"bufio"
	"os"
	"os/exec"
	"runtime"
	"strings"
)

// Info is what the report records about the host.
type Info struct {
	CPUModel string
	NumCPU   int
	MemTotal string // from /proc/meminfo
	Kernel   string
	Go       string
	LoadAvg  string // /proc/loadavg at the time of the call
}

// Read collects Info; missing pieces are left empty.
func Read() Info {
	in := Info{NumCPU: runtime.NumCPU(), Go: runtime.Version(), LoadAvg: LoadAvg()}
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
				in.CPUModel = strings.TrimSpace(v)
				break
			}
		}
		f.Close()
	}
	if f, err := os.Open("/proc/meminfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if k, v, ok := strings.Cut(sc.Text(), ":"); ok && k == "MemTotal" {
				in.MemTotal = strings.TrimSpace(v)
				break
			}
		}
		f.Close()
	}
	if out, err := exec.Command("uname", "-sr").Output(); err == nil {
		in.Kernel = strings.TrimSpace(string(out))
	}
	return in
}

// LoadAvg returns the first three fields of /proc/loadavg.
func LoadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) > 3 {
		f = f[:3]
	}
	return strings.Join(f, " ")
}

// GitCommit returns the commit of the repository at dir, with "-dirty" if
// tracked files are modified.
func GitCommit(dir string) string {
	out, err := exec.Command("git", "-C", dir, "rev-parse", "HEAD").Output()
	if err != nil {
		return "unknown"
	}
	c := strings.TrimSpace(string(out))
	if st, err := exec.Command("git", "-C", dir, "status", "--porcelain", "--untracked-files=no").Output(); err == nil && len(strings.TrimSpace(string(st))) > 0 {
		c += "-dirty"
	}
	return c
}
