// Package machine describes the host a benchmark ran on.
package machine

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
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

// CPUTimes is the host's aggregate CPU time from /proc/stat, in clock ticks.
type CPUTimes struct {
	Total uint64 // every state, steal included
	Steal uint64 // time the hypervisor ran another guest on one of this guest's vCPUs
}

// ReadCPUTimes reads the "cpu" line of /proc/stat; ok is false where it
// cannot (not Linux, or a format it does not know).
func ReadCPUTimes() (t CPUTimes, ok bool) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return t, false
	}
	return parseCPULine(string(b))
}

// parseCPULine parses the first line of /proc/stat: "cpu" and then user,
// nice, system, idle, iowait, irq, softirq, steal, guest, guest_nice. Guest
// time is already counted in user and nice, so it is left out of the total.
func parseCPULine(stat string) (t CPUTimes, ok bool) {
	line, _, _ := strings.Cut(stat, "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return t, false
	}
	for i, s := range f[1:9] {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return CPUTimes{}, false
		}
		t.Total += v
		if i == 7 {
			t.Steal = v
		}
	}
	return t, true
}

// StealSince is StealPercent from a to now ("" where /proc/stat cannot be
// read).
func StealSince(a CPUTimes) string {
	b, ok := ReadCPUTimes()
	if !ok {
		return ""
	}
	return StealPercent(a, b)
}

// StealPercent is the share of the host's CPU time between a and b that the
// hypervisor gave to other guests ("" when nothing elapsed). On a shared
// virtual machine it is the one kind of outside load the load average does
// not show: a vCPU that is stolen looks busy to nobody here, yet every
// process on it stalls.
func StealPercent(a, b CPUTimes) string {
	if b.Total <= a.Total || b.Steal < a.Steal {
		return ""
	}
	return fmt.Sprintf("%.1f", 100*float64(b.Steal-a.Steal)/float64(b.Total-a.Total))
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
