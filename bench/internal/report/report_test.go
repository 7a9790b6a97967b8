package report

import (
	"image"
	"image/color"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tenure-io/tenure/bench/internal/suite"
)

const msec = time.Millisecond

func res(rps float64, p50, p99 time.Duration, errs int) suite.Result {
	return suite.Result{RPS: rps, P50: p50, P99: p99, Errors: errs}
}

func TestMedian(t *testing.T) {
	tests := []struct {
		name     string
		runs     []suite.Result
		rps      float64
		p50, p99 time.Duration
		errs     int
	}{
		{"single run", []suite.Result{res(1234.5, 7*msec, 70*msec, 2)}, 1234.5, 7 * msec, 70 * msec, 2},
		// Every field is sorted on its own: the median run of one field
		// is not the median run of another.
		{"odd", []suite.Result{res(1000, 30*msec, 100*msec, 0), res(3000, 10*msec, 300*msec, 1), res(2000, 20*msec, 200*msec, 2)},
			2000, 20 * msec, 200 * msec, 3},
		{"odd, unsorted fields", []suite.Result{res(5, 1*msec, 9*msec, 0), res(1, 9*msec, 5*msec, 0), res(9, 5*msec, 1*msec, 0)},
			5, 5 * msec, 5 * msec, 0},
		// Even: the mean of the two middle values.
		{"even", []suite.Result{res(1000, 8*msec, 40*msec, 0), res(4000, 2*msec, 10*msec, 0), res(2000, 6*msec, 30*msec, 0), res(3000, 4*msec, 20*msec, 0)},
			2500, 5 * msec, 25 * msec, 0},
		{"two", []suite.Result{res(100, 1*msec, 3*msec, 4), res(300, 2*msec, 5*msec, 5)}, 200, 1500 * time.Microsecond, 4 * msec, 9},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, ok := Median(tt.runs)
			if !ok {
				t.Fatal("ok = false")
			}
			if m.RPS != tt.rps || m.P50 != tt.p50 || m.P99 != tt.p99 || m.Errors != tt.errs {
				t.Errorf("got %v req/s p50 %v p99 %v errors %d; want %v %v %v %d", m.RPS, m.P50, m.P99, m.Errors, tt.rps, tt.p50, tt.p99, tt.errs)
			}
		})
	}
	if _, ok := Median(nil); ok {
		t.Error("Median(nil): ok = true")
	}
}

// etcdBenchRun is a plain (non-Comparer) suite, put-100, with the etcd
// reference, tenure and a row whose every run failed.
func etcdBenchRun() *Run {
	s := suite.EtcdBenchSuites()[0] // put-100, throughput
	if s.ID() != "put-100" {
		panic("suite order changed: " + s.ID())
	}
	withLoad := res(1000, 10*msec, 100*msec, 0)
	withLoad.Extra = map[string]string{"load": "0.50 0.40 0.30"}
	sr := &SuiteResult{
		Suite: s,
		Rows: []Row{
			{Label: "etcd 3.7.3", System: "etcd 3.7.3", Kind: "etcd"},
			{Label: "tenure", System: "tenure", Kind: "tenure"},
			{Label: "other", System: "other", Kind: "etcd"},
		},
		Runs: map[string][]suite.Result{
			// medians: 2000 req/s, p50 20 ms, p99 200 ms; errors 0+1+2
			"etcd 3.7.3": {withLoad, res(3000, 30*msec, 300*msec, 1), res(2000, 20*msec, 200*msec, 2)},
			// medians: (2000+3000)/2 = 2500 req/s, p50 (4+6)/2 = 5 ms, p99 (20+30)/2 = 25 ms
			"tenure": {res(1000, 8*msec, 40*msec, 0), res(4000, 2*msec, 10*msec, 0), res(2000, 6*msec, 30*msec, 0), res(3000, 4*msec, 20*msec, 0)},
		},
		Failures: map[string][]string{
			"tenure": {"cluster start: no\nleader"},
			"other":  {"a", "b"},
		},
		Commands: map[string]string{"etcd 3.7.3": "benchmark --the-ref-command", "tenure": "benchmark --the-sut-command"},
	}
	return &Run{
		Start: time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC), End: time.Date(2026, 11, 30, 12, 10, 0, 0, time.UTC),
		Mode: suite.Short, Repeat: 4, Commit: "abc123",
		Slots:  []Slot{{Role: "reference", Label: "etcd 3.7.3"}, {Role: "system under test", Label: "tenure"}},
		Suites: []*SuiteResult{sr},
		ClusterCommands: map[string][]string{
			"tenure":     {"bin/tenure serve --name=m1", "bin/tenure serve --name=m2"},
			"etcd 3.7.3": {"bin/etcd --name=m1"},
		},
	}
}

func TestMarkdownPlainTable(t *testing.T) {
	md := etcdBenchRun().Markdown("charts")
	for _, want := range []string{
		"Ratio = tenure / etcd 3.7.3 (req/s: higher is better; p50: lower is better).",
		"## put, 100 clients over 10 connections\n",
		"| system | req/s | p50 (ms) | p99 (ms) | errors | runs | ratio req/s | ratio p50 |\n",
		// The reference has no ratio to itself; errors are summed over runs.
		"\n| etcd 3.7.3 | 2000 | 20.000 | 200.000 | 3 | 3 | — | — |\n",
		// 2500 / 2000 = 1.25 (higher is better), 5 ms / 20 ms = 0.25 (lower is better).
		"\n| tenure | 2500 | 5.000 | 25.000 | 0 | 4 (+1 failed) | 1.25× | 0.25× |\n",
		"\n| other | — | — | — | — | 0 (2 failed) | — | — |\n",
		"Individual runs (req/s / p50 ms [load average before the run; CPU steal during it, where measured]): " +
			"etcd 3.7.3: 1000 / 10.000 [0.50], 3000 / 30.000, 2000 / 20.000; " +
			"tenure: 1000 / 8.000, 4000 / 2.000, 2000 / 6.000, 3000 / 4.000; other: ;\n",
		"\n- tenure failure: `cluster start: no leader`\n",
		"\n- other failure: `a`\n", "\n- other failure: `b`\n",
		// The reference's command is the one shown.
		"\n```\nbenchmark --the-ref-command\n```\n",
		"\n![put-100](charts/put-100.png)\n",
		// One member per cluster, systems sorted.
		"\netcd 3.7.3:\n\n```\nbin/etcd --name=m1\n```\n\ntenure:\n\n```\nbin/tenure serve --name=m1\n```\n",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q\n--- markdown:\n%s", want, md)
		}
	}
	if strings.Contains(md, "the-sut-command") {
		t.Error("markdown shows the system under test's command instead of only the reference's")
	}
	if strings.Contains(md, "--name=m2") {
		t.Error("markdown shows more than one member's command line")
	}
	if md2 := etcdBenchRun().Markdown(""); strings.Contains(md2, ".png") {
		t.Error("markdown links a chart although chartDir is empty")
	}
}

// A reference without a usable median gives no ratios (no division by zero,
// no +Inf/NaN in the table).
func TestMarkdownPlainTableNoReference(t *testing.T) {
	r := etcdBenchRun()
	sr := r.Suites[0]
	// Reference ran but measured 0 req/s and 0 p50.
	sr.Runs["etcd 3.7.3"] = []suite.Result{res(0, 0, 0, 5)}
	md := r.Markdown("")
	if want := "\n| tenure | 2500 | 5.000 | 25.000 | 0 | 4 (+1 failed) | — | — |\n"; !strings.Contains(md, want) {
		t.Errorf("reference at 0: markdown lacks %q\n%s", want, md)
	}
	// Reference without any successful run.
	delete(sr.Runs, "etcd 3.7.3")
	sr.Failures["etcd 3.7.3"] = []string{"boom"}
	md = r.Markdown("")
	for _, want := range []string{
		"\n| etcd 3.7.3 | — | — | — | — | 0 (1 failed) | — | — |\n",
		"\n| tenure | 2500 | 5.000 | 25.000 | 0 | 4 (+1 failed) | — | — |\n",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("no reference run: markdown lacks %q\n%s", want, md)
		}
	}
	for _, bad := range []string{"Inf", "NaN"} {
		if strings.Contains(md, bad) {
			t.Errorf("markdown contains %s", bad)
		}
	}
}

// lockRun is a Comparer suite (lock-50x1: cycles/s, higher is better,
// compared with etcd v3lock, etcd Mutex and ZooKeeper), with the validation
// setup's second etcd in the system-under-test slot.
func lockRun() *Run {
	var s suite.Suite
	for _, x := range suite.LockSuites() {
		if x.ID() == "lock-50x1" {
			s = x
		}
	}
	note := res(120, 30*msec, 90*msec, 2)
	note.Extra = map[string]string{"note": "a note", "load": "1.25 1.00 0.75", "steal": "12.5"}
	note.ErrDist = map[string]int{"acquire: deadline exceeded": 2}
	sr := &SuiteResult{
		Suite: s,
		Rows: []Row{
			{Label: "etcd 3.7.3 · v3lock", System: "etcd 3.7.3", Kind: "etcd", Variant: suite.LockV3},
			{Label: "etcd 3.7.3 · Mutex", System: "etcd 3.7.3", Kind: "etcd", Variant: suite.LockMutex},
			{Label: "etcd 3.7.3 (as SUT) · v3lock", System: "etcd 3.7.3 (as SUT)", Kind: "etcd", Variant: suite.LockV3},
			{Label: "tenure · tenure.v1 Locks", System: "tenure", Kind: "tenure", Variant: suite.LockNative},
			{Label: "ZooKeeper 3.8 · lock recipe", System: "ZooKeeper 3.8", Kind: "zookeeper", Variant: suite.LockZK},
			{Label: "Redis · SET NX PX + Lua unlock", System: "Redis", Kind: "redis", Variant: suite.LockRedis},
		},
		Runs: map[string][]suite.Result{
			"etcd 3.7.3 · v3lock":            {res(100, 50*msec, 200*msec, 0), res(80, 60*msec, 100*msec, 0), res(140, 40*msec, 300*msec, 0)},
			"etcd 3.7.3 · Mutex":             {res(50, 100*msec, 400*msec, 0)},
			"etcd 3.7.3 (as SUT) · v3lock":   {res(110, 45*msec, 210*msec, 0)},
			"tenure · tenure.v1 Locks":       {res(400, 10*msec, 20*msec, 0), note},
			"ZooKeeper 3.8 · lock recipe":    {res(40, 200*msec, 800*msec, 0)},
			"Redis · SET NX PX + Lua unlock": {},
		},
		Failures: map[string][]string{"Redis · SET NX PX + Lua unlock": {"redis-server not installed"}},
		Commands: map[string]string{"tenure · tenure.v1 Locks": "tenure-bench lock suite lock-50x1"},
	}
	return &Run{Mode: suite.Short, Repeat: 1,
		Slots:  []Slot{{Role: "reference", Label: "etcd 3.7.3"}, {Role: "system under test", Label: "etcd 3.7.3 (as SUT)"}},
		Suites: []*SuiteResult{sr}}
}

func TestMarkdownComparerThroughput(t *testing.T) {
	md := lockRun().Markdown("charts")
	for _, want := range []string{
		"| system · API | cycles/s | p50 (ms) | p99 (ms) | errors | runs | × etcd v3lock | × etcd Mutex | × ZooKeeper |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|\n",
		// v3lock median 100 (80, 100, 140): 100/50 = 2, 100/40 = 2.5.
		"\n| etcd 3.7.3 · v3lock | 100 | 50.000 | 200.000 | 0 | 3 | — | 2.00× | 2.50× |\n",
		"\n| etcd 3.7.3 · Mutex | 50 | 100.000 | 400.000 | 0 | 1 | 0.50× | — | 1.25× |\n",
		// The second etcd (etcd vs etcd validation) is compared with the
		// reference etcd's v3lock row: 110/100.
		"\n| etcd 3.7.3 (as SUT) · v3lock | 110 | 45.000 | 210.000 | 0 | 1 | 1.10× | 2.20× | 2.75× |\n",
		// (400+120)/2 = 260: 2.6×, 5.2×, 6.5×.
		"\n| tenure · tenure.v1 Locks | 260 | 20.000 | 55.000 | 2 | 2 | 2.60× | 5.20× | 6.50× |\n",
		"\n| ZooKeeper 3.8 · lock recipe | 40 | 200.000 | 800.000 | 0 | 1 | 0.40× | 0.80× | — |\n",
		"\n| Redis · SET NX PX + Lua unlock | — | — | — | — | 0 (1 failed) | — | — | — |\n",
		" tenure · tenure.v1 Locks: 400 / 10.000 / 20.000, 120 / 30.000 / 90.000 (a note) [1.25; steal 12.5%];",
		"\n- tenure · tenure.v1 Locks errors in one run: `map[acquire: deadline exceeded:2]`\n",
		"\n- Redis · SET NX PX + Lua unlock failure: `redis-server not installed`\n",
		"\n```\ntenure-bench lock suite lock-50x1\n```\n",
		"\n![lock-50x1](charts/lock-50x1.png)\n",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q\n--- markdown:\n%s", want, md)
		}
	}
}

func TestMarkdownComparerLatency(t *testing.T) {
	pick := func(all []suite.Suite, id string) suite.Suite {
		for _, s := range all {
			if s.ID() == id {
				return s
			}
		}
		t.Fatalf("no suite %s", id)
		return nil
	}
	rows := []Row{
		{Label: "etcd 3.7.3", System: "etcd 3.7.3", Kind: "etcd"},
		{Label: "tenure", System: "tenure", Kind: "tenure"},
	}
	// watch: p99 is the primary metric, lower is better.
	watch := &SuiteResult{Suite: pick(suite.WatchSuites(), "watch-latency-100"), Rows: rows,
		Runs: map[string][]suite.Result{
			"etcd 3.7.3": {res(2000, 2*msec, 10*msec, 0)},
			"tenure":     {res(2000, 3*msec, 4*msec, 0)},
		}}
	// failover: p50 is the primary metric.
	failover := &SuiteResult{Suite: pick(suite.FailoverSuites(), "failover"), Rows: rows,
		Runs: map[string][]suite.Result{
			"etcd 3.7.3": {res(1, 2000*msec, 2000*msec, 0)},
			"tenure":     {res(1, 1500*msec, 1500*msec, 0)},
		}}
	// p99 of the reference 0: no ratio.
	zero := &SuiteResult{Suite: pick(suite.WatchSuites(), "watch-fanout-10k"), Rows: rows,
		Runs: map[string][]suite.Result{
			"etcd 3.7.3": {res(2000, 0, 0, 0)},
			"tenure":     {res(2000, 3*msec, 4*msec, 0)},
		}}
	r := &Run{Slots: []Slot{{Label: "etcd 3.7.3"}, {Label: "tenure"}}, Suites: []*SuiteResult{watch, failover, zero}}
	md := r.Markdown("")
	sections := strings.Split(md, "\n## ")
	if len(sections) != 5 { // preamble, 3 suites, cluster commands
		t.Fatalf("%d sections:\n%s", len(sections), md)
	}
	for i, want := range []string{
		"\n| tenure | 2000 | 3.000 | 4.000 | 0 | 1 | 0.40× |\n",    // 4/10 (p99, not p50 3/2)
		"\n| tenure | 1 | 1500.000 | 1500.000 | 0 | 1 | 0.75× |\n", // 1.5 s / 2 s
		"\n| tenure | 2000 | 3.000 | 4.000 | 0 | 1 | — |\n",        // reference p99 0
	} {
		if !strings.Contains(sections[i+1], want) {
			t.Errorf("section %d lacks %q:\n%s", i+1, want, sections[i+1])
		}
		if !strings.Contains(sections[i+1], "\n| etcd 3.7.3 |") || !strings.Contains(sections[i+1], " | — |\n") {
			t.Errorf("section %d: reference row missing or compared with itself:\n%s", i+1, sections[i+1])
		}
	}
	if !strings.Contains(sections[1], "Primary metric: p99 latency") || !strings.Contains(sections[2], "Primary metric: p50 latency") {
		t.Errorf("primary metric headings wrong:\n%s", md)
	}
}

func TestWriteCharts(t *testing.T) {
	dir := t.TempDir()
	plain, locks := etcdBenchRun(), lockRun()
	r := &Run{Slots: plain.Slots, Suites: append(plain.Suites, locks.Suites...)}
	// A suite without any successful run gets no chart (and no error).
	empty := &SuiteResult{Suite: suite.FailoverSuites()[0], Rows: []Row{{Label: "x"}}, Runs: map[string][]suite.Result{}}
	r.Suites = append(r.Suites, empty)
	if err := r.WriteCharts(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "failover.png")); !os.IsNotExist(err) {
		t.Errorf("failover.png without runs: stat err %v, want not exist", err)
	}
	tests := []struct {
		file string
		w, h int
		bars []color.Color // the rows' colours (rows with a median, in order)
	}{
		// 860 × 360 pt at 96 dpi: 1146.7 → 1147 × 480 px; 2 rows with a median.
		{"put-100.png", 1147, 480, palette[:2]},
		// 5 rows with a median (Redis has none): 360 + 40 pt = 400 pt → 533.3 → 533 px.
		{"lock-50x1.png", 1147, 533, palette[:5]},
	}
	for _, tt := range tests {
		f, err := os.Open(filepath.Join(dir, tt.file))
		if err != nil {
			t.Fatal(err)
		}
		img, err := png.Decode(f)
		f.Close()
		if err != nil {
			t.Fatalf("%s: %v", tt.file, err)
		}
		if b := img.Bounds(); b.Dx() != tt.w || b.Dy() != tt.h {
			t.Errorf("%s: %d×%d px, want %d×%d", tt.file, b.Dx(), b.Dy(), tt.w, tt.h)
		}
		for i, c := range tt.bars {
			if n := countColor(img, c); n < 100 {
				t.Errorf("%s: bar colour %d (%v) on %d pixels; want a bar (≥ 100)", tt.file, i, c, n)
			}
		}
		if n := countColor(img, palette[len(tt.bars)]); n != 0 {
			t.Errorf("%s: colour of row %d drawn on %d pixels, but only %d rows have a median", tt.file, len(tt.bars), n, len(tt.bars))
		}
	}
}

func countColor(img image.Image, c color.Color) int {
	r0, g0, b0, a0 := c.RGBA()
	n := 0
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			r, g, bb, a := img.At(x, y).RGBA()
			if r == r0 && g == g0 && bb == b0 && a == a0 {
				n++
			}
		}
	}
	return n
}

// Committed reports carry no paths of the machine that ran them.
func TestRelativizePaths(t *testing.T) {
	in := "`/srv/x/main/bench/bin/etcd` --data-dir=/srv/x/main/bench/work/r1/data " +
		"(repo /srv/x/main/cmd/tenure) /usr/share/java/zookeeper.jar /srv/x/other/f"
	want := "`bench/bin/etcd` --data-dir=bench/work/r1/data " +
		"(repo ./cmd/tenure) /usr/share/java/zookeeper.jar /srv/x/other/f"
	if got := relativizePaths(in, "/srv/x/main/bench"); got != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
	if got := relativizePaths(in, "/bench"); got != in {
		t.Fatalf("bench at the file system root: %s changed to %s", in, got)
	}
}

// Paired ratios: the system under test's rows against each reference, run by
// run, where the ratio of the column medians (876/199 = 4.40×) and the median
// of the per-repetition ratios (3.65×) disagree. References or rows whose runs
// do not line up by repetition (a failure, a different count) are left out.
func TestMarkdownComparerPairedRatios(t *testing.T) {
	r := lockRun()
	r.Repeat = 3
	r.Slots[1].Label = "tenure"
	sr := r.Suites[0]
	sr.Rows = []Row{
		{Label: "etcd 3.7.3 · v3lock", System: "etcd 3.7.3", Kind: "etcd", Variant: suite.LockV3},
		{Label: "etcd 3.7.3 · Mutex", System: "etcd 3.7.3", Kind: "etcd", Variant: suite.LockMutex},
		{Label: "ZooKeeper 3.8 · lock recipe", System: "ZooKeeper 3.8", Kind: "zookeeper", Variant: suite.LockZK},
		{Label: "tenure · tenure.v1 Session", System: "tenure", Kind: "tenure", Variant: suite.LockSession},
		{Label: "tenure · tenure.v1 Locks", System: "tenure", Kind: "tenure", Variant: suite.LockNative},
	}
	sr.Runs = map[string][]suite.Result{
		"etcd 3.7.3 · v3lock":         {res(253, msec, msec, 0), res(199, msec, msec, 0), res(186, msec, msec, 0)},
		"etcd 3.7.3 · Mutex":          {res(100, msec, msec, 0), res(100, msec, msec, 0)},
		"ZooKeeper 3.8 · lock recipe": {res(50, msec, msec, 0), res(50, msec, msec, 0), res(50, msec, msec, 0)},
		"tenure · tenure.v1 Session":  {res(886, msec, msec, 0), res(726, msec, msec, 0), res(876, msec, msec, 0)},
		"tenure · tenure.v1 Locks":    {res(600, msec, msec, 0), res(600, msec, msec, 0)},
	}
	sr.Failures = map[string][]string{"ZooKeeper 3.8 · lock recipe": {"one run failed"}}
	md := r.Markdown("")
	want := "\nRatios repetition by repetition (the runs of one repetition ran back to back): " +
		"tenure · tenure.v1 Session / etcd 3.7.3 · v3lock: 3.50×, 3.65×, 4.71× (median 3.65×).\n"
	if !strings.Contains(md, want) {
		t.Errorf("markdown lacks %q\n--- markdown:\n%s", want, md)
	}
	if !strings.Contains(md, "\n| tenure · tenure.v1 Session | 876 | 1.000 | 1.000 | 0 | 3 | 4.40× |") {
		t.Errorf("the table's ratio of medians changed\n--- markdown:\n%s", md)
	}
	// With a single repetition there is nothing to pair.
	r.Repeat = 1
	for label, runs := range sr.Runs {
		sr.Runs[label] = runs[:1]
	}
	if md := r.Markdown(""); strings.Contains(md, "Ratios repetition by repetition") {
		t.Errorf("paired ratios from one repetition\n--- markdown:\n%s", md)
	}
}

// A plain table pairs the system under test with the reference the same way,
// on the suite's primary metric (put-100: req/s); a row with a failed run has
// no paired ratios.
func TestMarkdownPlainTablePairedRatios(t *testing.T) {
	r := etcdBenchRun()
	if md := r.Markdown(""); strings.Contains(md, "Ratios repetition by repetition") {
		t.Errorf("paired ratios for a row with a failed run\n--- markdown:\n%s", md)
	}
	sr := r.Suites[0]
	delete(sr.Failures, "tenure")
	sr.Runs["etcd 3.7.3"] = append(sr.Runs["etcd 3.7.3"], res(4000, 40*msec, 400*msec, 0))
	want := "\nRatios repetition by repetition (the runs of one repetition ran back to back): " +
		"tenure / etcd 3.7.3: 1.00×, 1.33×, 1.00×, 0.75× (median 1.00×).\n"
	if md := r.Markdown(""); !strings.Contains(md, want) {
		t.Errorf("markdown lacks %q\n--- markdown:\n%s", want, md)
	}
	// put-1's primary metric is p50 latency: tenure's 8, 2, 6, 4 ms against
	// etcd's 10, 30, 20, 40 ms.
	for _, s := range suite.EtcdBenchSuites() {
		if s.ID() == "put-1" {
			sr.Suite = s
		}
	}
	if sr.Suite.Primary() != suite.LatencyP50 {
		t.Fatalf("put-1's primary metric is %v, want p50", sr.Suite.Primary())
	}
	want = "tenure / etcd 3.7.3: 0.80×, 0.07×, 0.30×, 0.10× (median 0.20×).\n"
	if md := r.Markdown(""); !strings.Contains(md, want) {
		t.Errorf("markdown lacks %q\n--- markdown:\n%s", want, md)
	}
}
