package procs

import (
	"log/slog"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Config tunes a Controller; zero fields take the defaults below.
type Config struct {
	Max         int           // processors under load; runtime.GOMAXPROCS(0) when 0
	Tick        time.Duration // how often CPU time is sampled
	RaiseAbove  float64       // cores used over one tick at one processor that raise to Max
	LowerBelow  float64       // cores used over LowerWindow below which Max lowers to one
	LowerWindow time.Duration // see LowerBelow; also the least time between a raise and a lowering
	Logger      *slog.Logger  // each change at debug level; nil: none
}

// Defaults. A tick of 50 ms reacts to a burst within 50 ms and costs 20
// wake-ups a second. 0.75 of a core at one processor is a processor busy
// three quarters of the time: goroutines have started to queue. Below half
// a core over two seconds, a member is waiting far more than it runs.
const (
	DefaultTick        = 50 * time.Millisecond
	DefaultRaiseAbove  = 0.75
	DefaultLowerBelow  = 0.5
	DefaultLowerWindow = 2 * time.Second
)

// Controller moves GOMAXPROCS between one and Config.Max (see the package
// doc).
type Controller struct {
	cfg  Config
	set  func(int)
	stop chan struct{}
	done chan struct{}

	mu     sync.Mutex
	procs  int
	raises uint64
	lowers uint64
	// held is when Max was last asked for (a busy tick, a Boost, or the
	// first sample): no lowering within a window of it.
	held time.Time

	// the loop's own state (step)
	window []sample // oldest first; window[0] at or before now-LowerWindow once full
}

type sample struct {
	at  time.Time
	cpu time.Duration
}

// running is the process's active controller, for Boost.
var running atomic.Pointer[Controller]

// Start runs a controller on this process's GOMAXPROCS.
func Start(cfg Config) *Controller {
	c := newController(cfg, func(n int) { runtime.GOMAXPROCS(n) })
	if !c.Active() {
		close(c.done)
		return c
	}
	running.Store(c)
	go c.run(processCPU)
	return c
}

// Boost is for code about to start work that spreads over many goroutines
// at once — a watch revision fanned out to hundreds of watchers — and that
// a tick's worth of CPU sampling would see only after the fact: the running
// controller (if any) raises to Max now, and does not lower within a
// window. With Max already set it costs a clock read and an uncontended
// lock.
func Boost() {
	if c := running.Load(); c != nil {
		c.boost(time.Now())
	}
}

// boost takes c.mu even at Max (an uncontended lock per wide revision),
// so a lowering is decided either before it (and undone here) or after it
// (and seeing this hold).
func (c *Controller) boost(now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.held = now
	if c.procs < c.cfg.Max {
		c.change(c.cfg.Max, "raised for a burst", -1)
		c.raises++
	}
}

func newController(cfg Config, set func(int)) *Controller {
	if cfg.Max <= 0 {
		cfg.Max = runtime.GOMAXPROCS(0)
	}
	if cfg.Tick <= 0 {
		cfg.Tick = DefaultTick
	}
	if cfg.RaiseAbove <= 0 {
		cfg.RaiseAbove = DefaultRaiseAbove
	}
	if cfg.LowerBelow <= 0 {
		cfg.LowerBelow = DefaultLowerBelow
	}
	if cfg.LowerWindow <= 0 {
		cfg.LowerWindow = DefaultLowerWindow
	}
	return &Controller{cfg: cfg, set: set, procs: cfg.Max, stop: make(chan struct{}), done: make(chan struct{})}
}

// Active reports whether the controller may change GOMAXPROCS (Max > 1).
func (c *Controller) Active() bool { return c.cfg.Max > 1 }

// Max is the processor count under load.
func (c *Controller) Max() int { return c.cfg.Max }

// Procs is the processor count the controller last set.
func (c *Controller) Procs() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.procs
}

// Changes counts raises to Max and lowerings to one.
func (c *Controller) Changes() (raises, lowers uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.raises, c.lowers
}

// Stop ends the controller and restores Max processors.
func (c *Controller) Stop() {
	if !c.Active() {
		return
	}
	running.CompareAndSwap(c, nil)
	select {
	case <-c.stop:
	default:
		close(c.stop)
	}
	<-c.done
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.procs != c.cfg.Max {
		c.procs = c.cfg.Max
		c.set(c.cfg.Max)
	}
}

func (c *Controller) run(cpu func() time.Duration) {
	defer close(c.done)
	t := time.NewTicker(c.cfg.Tick)
	defer t.Stop()
	c.step(time.Now(), cpu())
	for {
		select {
		case <-c.stop:
			return
		case now := <-t.C:
			c.step(now, cpu())
		}
	}
}

// step takes one sample of the process's CPU time and decides.
func (c *Controller) step(now time.Time, cpu time.Duration) {
	if !c.Active() {
		return
	}
	cur := sample{at: now, cpu: cpu}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.window) == 0 {
		c.window = append(c.window, cur)
		c.held = now // no lowering within the first window either
		return
	}
	prev := c.window[len(c.window)-1]
	c.window = append(c.window, cur)
	for len(c.window) > 2 && !c.window[1].at.After(now.Add(-c.cfg.LowerWindow)) {
		c.window = c.window[1:]
	}
	switch {
	case c.procs < c.cfg.Max && cores(prev, cur) >= c.cfg.RaiseAbove:
		c.change(c.cfg.Max, "raised", cores(prev, cur))
		c.raises++
		c.held = now
	case c.procs == c.cfg.Max && now.Sub(c.held) >= c.cfg.LowerWindow &&
		now.Sub(c.window[0].at) >= c.cfg.LowerWindow && cores(c.window[0], cur) < c.cfg.LowerBelow:
		c.change(1, "lowered", cores(c.window[0], cur))
		c.lowers++
	}
}

// change sets n processors; under c.mu. used is the cores that decided it
// (-1: a Boost, not a measurement).
func (c *Controller) change(n int, what string, used float64) {
	c.procs = n
	c.set(n)
	if c.cfg.Logger != nil {
		c.cfg.Logger.Debug("GOMAXPROCS "+what, "procs", n, "cores-used", used)
	}
}

// cores is the CPU time used between a and b, in cores.
func cores(a, b sample) float64 {
	d := b.at.Sub(a.at)
	if d <= 0 {
		return 0
	}
	return float64(b.cpu-a.cpu) / float64(d)
}

// processCPU is the process's user and system CPU time so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
