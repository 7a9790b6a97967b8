package cluster

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

// EtcdVersion is the etcd release the harness validates itself against.
const EtcdVersion = "3.7.3"

var (
	buildOnce sync.Once
	buildDir  string
	buildErr  error

	tenureOnce sync.Once
	tenureBin  string
	tenureErr  error

	etcdctlOnce sync.Once
	etcdctlBin  string
	etcdctlErr  error

	etcdOnce sync.Once
	etcdBin  string
	etcdErr  error
)

// ModuleRoot walks up from the working directory to the directory holding go.mod.
func ModuleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("go.mod not found above the working directory")
		}
		dir = parent
	}
}

func binDir() (string, error) {
	buildOnce.Do(func() {
		// One directory per test process; removed by nobody on purpose only if
		// the OS cleans /tmp: binaries are needed until the last test ends.
		buildDir, buildErr = os.MkdirTemp("", "tenure-test-bin-")
	})
	return buildDir, buildErr
}

func goBuild(dir, out string, args ...string) error {
	cmd := exec.Command("go", append([]string{"build", "-o", out}, args...)...)
	cmd.Dir = dir
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %v in %s: %v\n%s", args, dir, err, b)
	}
	return nil
}

// TenureBinary builds ./cmd/tenure once per test process and returns its path.
func TenureBinary(t TB) string {
	t.Helper()
	tenureOnce.Do(func() {
		root, err := ModuleRoot()
		if err != nil {
			tenureErr = err
			return
		}
		dir, err := binDir()
		if err != nil {
			tenureErr = err
			return
		}
		tenureBin = filepath.Join(dir, "tenure")
		tenureErr = goBuild(root, tenureBin, "./cmd/tenure")
	})
	if tenureErr != nil {
		t.Fatalf("building tenure: %v", tenureErr)
	}
	return tenureBin
}

// EtcdctlBinary builds etcdctl (the module's tool dependency) once per test process.
func EtcdctlBinary(t TB) string {
	t.Helper()
	etcdctlOnce.Do(func() {
		root, err := ModuleRoot()
		if err != nil {
			etcdctlErr = err
			return
		}
		dir, err := binDir()
		if err != nil {
			etcdctlErr = err
			return
		}
		etcdctlBin = filepath.Join(dir, "etcdctl")
		etcdctlErr = goBuild(root, etcdctlBin, "go.etcd.io/etcd/etcdctl/v3")
	})
	if etcdctlErr != nil {
		t.Fatalf("building etcdctl: %v", etcdctlErr)
	}
	return etcdctlBin
}

// EtcdBinary returns a real etcd server binary, for validating the harness
// and the tests against the reference implementation. It is built in a
// throwaway module (etcd's server module is deliberately not a dependency of
// ours) and cached under os.UserCacheDir()/tenure-test/etcd-<version>.
// The caller must have checked EtcdEnabled.
func EtcdBinary(t TB) string {
	t.Helper()
	etcdOnce.Do(func() {
		cache, err := os.UserCacheDir()
		if err != nil {
			etcdErr = err
			return
		}
		dir := filepath.Join(cache, "tenure-test")
		etcdBin = filepath.Join(dir, "etcd-"+EtcdVersion)
		if _, err := os.Stat(etcdBin); err == nil {
			return
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			etcdErr = err
			return
		}
		mod, err := os.MkdirTemp("", "tenure-etcd-build-")
		if err != nil {
			etcdErr = err
			return
		}
		defer os.RemoveAll(mod)
		steps := [][]string{
			{"mod", "init", "x"},
			{"get", "go.etcd.io/etcd/server/v3@v" + EtcdVersion},
		}
		for _, s := range steps {
			cmd := exec.Command("go", s...)
			cmd.Dir = mod
			cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod")
			if b, err := cmd.CombinedOutput(); err != nil {
				etcdErr = fmt.Errorf("go %v: %v\n%s", s, err, b)
				return
			}
		}
		tmp := etcdBin + ".tmp"
		if err := goBuild(mod, tmp, "go.etcd.io/etcd/server/v3"); err != nil {
			etcdErr = err
			return
		}
		etcdErr = os.Rename(tmp, etcdBin)
	})
	if etcdErr != nil {
		t.Fatalf("building etcd %s: %v", EtcdVersion, etcdErr)
	}
	return etcdBin
}

// EtcdEnabled reports whether the developer asked for validation against
// real etcd (TENURE_TEST_ETCD=1 or TENURE_TEST_TARGET=etcd).
func EtcdEnabled() bool {
	return os.Getenv("TENURE_TEST_ETCD") == "1" || os.Getenv("TENURE_TEST_TARGET") == "etcd"
}

// RequireEtcd skips the test unless validation against real etcd is enabled.
// Only harness self-tests use it: real etcd is a developer tool, not a
// service the project depends on.
func RequireEtcd(t testing.TB) {
	t.Helper()
	if !EtcdEnabled() {
		t.Skip("set TENURE_TEST_ETCD=1 to validate the harness against real etcd " + EtcdVersion)
	}
}

// TargetFromEnv is the binary the end-to-end tests run against:
// TENURE_TEST_TARGET=etcd|tenure (default tenure). TENURE_TEST_ETCD=1 alone
// also selects etcd.
func TargetFromEnv(t TB) Binary {
	t.Helper()
	switch v := os.Getenv("TENURE_TEST_TARGET"); v {
	case "", "tenure":
		if v == "" && os.Getenv("TENURE_TEST_ETCD") == "1" {
			return Etcd
		}
		return Tenure
	case "etcd":
		return Etcd
	default:
		t.Fatalf("TENURE_TEST_TARGET=%q: want etcd or tenure", v)
		return Tenure
	}
}
