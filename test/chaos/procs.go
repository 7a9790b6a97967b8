package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"github.com/tenure-io/tenure/test/cluster"
)

// The chaos binary is also its own helper processes: started with
// TENURE_CHAOS_ROLE set, it runs that role (its flags follow in os.Args)
// instead of a chaos run. The go test entry dispatches the same way in
// TestMain, so the test binary re-executes itself too. No separate build
// step: `go run ./test/chaos` and `make chaos` start the helpers from
// os.Executable().
const roleEnv = "TENURE_CHAOS_ROLE"

// Roles.
const (
	roleResource   = "resource"   // the fenced resource (resource.go)
	roleLockClient = "lockclient" // one lock client (lockclient.go)
)

// runRoleFromEnv runs the helper role named by TENURE_CHAOS_ROLE and exits
// with its status; it returns only when the variable is unset.
func runRoleFromEnv() {
	role := os.Getenv(roleEnv)
	if role == "" {
		return
	}
	var code int
	switch role {
	case roleResource:
		code = resourceMain(os.Args[1:])
	case roleLockClient:
		code = lockClientMain(os.Args[1:])
	default:
		fmt.Fprintf(os.Stderr, "chaos: unknown %s=%q\n", roleEnv, role)
		code = 2
	}
	os.Exit(code)
}

// monoNow reads CLOCK_MONOTONIC: one clock shared by the harness and its
// helper processes (Go's own monotonic readings are private to a process),
// so times reported by different processes can be ordered. It counts the
// time a process spends stopped.
func monoNow() time.Duration {
	var ts syscall.Timespec
	const clockMonotonic = 1
	if _, _, e := syscall.Syscall(syscall.SYS_CLOCK_GETTIME, clockMonotonic, uintptr(unsafe.Pointer(&ts)), 0); e != 0 {
		panic(fmt.Sprintf("clock_gettime(CLOCK_MONOTONIC): %v", e))
	}
	return time.Duration(ts.Nano())
}

// child is a helper process: it reports on stdout (JSON lines, read by the
// caller through Lines), takes commands on stdin, and logs to stderr (a
// file). It dies with the harness (Pdeathsig) and is killed by the run's
// cleanup.
type child struct {
	name    string
	cmd     *exec.Cmd
	stdin   io.WriteCloser
	lines   chan string // stdout, line by line; closed at EOF
	logPath string

	mu     sync.Mutex
	exited bool
	code   int
	done   chan struct{}
	inMu   sync.Mutex // serialises writes to stdin
}

// startChild starts this executable in role with args; its stderr goes to
// logPath. The process is killed in tb's cleanup if still running.
func (r *run) startChild(name, role, logPath string, args ...string) (*child, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	lf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe, args...)
	cmd.Env = append(os.Environ(), roleEnv+"="+role)
	cmd.Stderr = lf
	// Setpgid: a terminal's ^C reaches the harness only, which cleans up;
	// Pdeathsig: a harness that dies any other way takes its helpers along
	// (a stopped helper is killed too: SIGKILL needs no SIGCONT).
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		lf.Close()
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		lf.Close()
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		lf.Close()
		return nil, err
	}
	c := &child{name: name, cmd: cmd, stdin: stdin, lines: make(chan string, 64), logPath: logPath, done: make(chan struct{})}
	r.tb.Cleanup(c.kill)
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		defer close(c.lines)
		s := bufio.NewScanner(stdout)
		s.Buffer(make([]byte, 64*1024), 16*1024*1024)
		for s.Scan() {
			c.lines <- s.Text()
		}
	}()
	go func() {
		<-readDone // Wait closes stdout: read it to the end first
		err := cmd.Wait()
		code := 0
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
			if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
				code = 128 + int(ws.Signal())
			}
		} else if err != nil {
			code = -1
		}
		lf.Close()
		c.mu.Lock()
		c.exited, c.code = true, code
		c.mu.Unlock()
		close(c.done)
	}()
	return c, nil
}

func (c *child) pid() int { return c.cmd.Process.Pid }

// send writes one command line to the child's stdin.
func (c *child) send(line string) error {
	c.inMu.Lock()
	defer c.inMu.Unlock()
	_, err := io.WriteString(c.stdin, line+"\n")
	return err
}

// closeStdin tells the child to finish (EOF on its stdin).
func (c *child) closeStdin() {
	c.inMu.Lock()
	defer c.inMu.Unlock()
	c.stdin.Close()
}

func (c *child) signal(sig syscall.Signal) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.exited {
		return fmt.Errorf("%s has exited", c.name)
	}
	return c.cmd.Process.Signal(sig)
}

// exitCode is the child's exit status (128+signal when killed by one);
// ok is false while it runs.
func (c *child) exitCode() (code int, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.code, c.exited
}

// wait waits up to d for the child to exit.
func (c *child) wait(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-c.done:
		return true
	case <-t.C:
		return false
	}
}

// kill SIGKILLs the child (stopped or not) and waits for it.
func (c *child) kill() {
	c.signal(syscall.SIGKILL)
	go func() {
		for range c.lines { // nobody may be reading any more
		}
	}()
	if !c.wait(10 * time.Second) {
		fmt.Fprintf(os.Stderr, "chaos: %s (pid %d) did not exit 10s after SIGKILL\n", c.name, c.pid())
	}
}

// stop: SIGSTOP, and wait until every thread of the process is stopped
// (SIGSTOP is asynchronous), so that the pause has begun when it returns.
func (c *child) stop() error {
	if err := c.signal(syscall.SIGSTOP); err != nil {
		return err
	}
	deadline := time.Now().Add(5 * time.Second)
	for !cluster.AllThreadsStopped(c.pid()) {
		if _, exited := c.exitCode(); exited {
			return fmt.Errorf("%s exited", c.name)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s (pid %d) did not stop within 5s of SIGSTOP", c.name, c.pid())
		}
		time.Sleep(time.Millisecond)
	}
	return nil
}

// cont resumes a stopped child (SIGCONT).
func (c *child) cont() error { return c.signal(syscall.SIGCONT) }

// logTail is the last n lines of the child's stderr log.
func (c *child) logTail(n int) string {
	b, err := os.ReadFile(c.logPath)
	if err != nil {
		return fmt.Sprintf("(cannot read %s: %v)", c.logPath, err)
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
