package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// envPrefix starts every environment variable that sets a flag:
// --initial-cluster ↔ TENURE_INITIAL_CLUSTER.
const envPrefix = "TENURE_"

// Exit codes.
const (
	exitOK     = 0
	exitError  = 1 // a command failed (client commands, server stopped with an error)
	exitConfig = 2 // `tenure serve` got a bad command line, environment or configuration
)

// app holds the process's outside world, so tests can supply their own.
type app struct {
	env     func(string) string // os.Getenv
	environ func() []string     // os.Environ
	stdin   io.Reader
	stdout  io.Writer
	stderr  io.Writer
}

func newApp() *app {
	return &app{env: os.Getenv, environ: os.Environ, stdin: os.Stdin, stdout: os.Stdout, stderr: os.Stderr}
}

// exitErr carries an exit code with an error.
type exitErr struct {
	code int
	err  error
}

func (e *exitErr) Error() string { return e.err.Error() }
func (e *exitErr) Unwrap() error { return e.err }

func withCode(code int, err error) error {
	if err == nil {
		return nil
	}
	return &exitErr{code: code, err: err}
}

// execute runs the command line and returns the process exit code. Errors
// are printed to stderr as "Error: <message>", one line per problem.
func execute(a *app, args []string) int {
	root := newRootCmd(a)
	root.SetArgs(args)
	err := root.Execute()
	if err == nil {
		return exitOK
	}
	code := exitError
	var ee *exitErr
	if errors.As(err, &ee) {
		code = ee.code
	}
	for _, line := range strings.Split(strings.TrimRight(err.Error(), "\n"), "\n") {
		fmt.Fprintf(a.stderr, "Error: %s\n", line)
	}
	return code
}

func newRootCmd(a *app) *cobra.Command {
	root := &cobra.Command{
		Use:   "tenure",
		Short: "Tenure: a Raft-replicated coordination service speaking the etcd v3 API",
		Long: "Tenure is a Raft-replicated coordination service, wire-compatible with the etcd v3 API.\n\n" +
			"`tenure serve` runs a member; the other commands are a client for humans, like etcdctl.\n" +
			"Every flag of `tenure serve` and the client flags --endpoints, --dial-timeout,\n" +
			"--command-timeout and --write-out can also be set by an environment variable\n" +
			"TENURE_<FLAG_NAME> (e.g. TENURE_INITIAL_CLUSTER); a flag on the command line wins.",
		SilenceErrors:     true,
		SilenceUsage:      true,
		CompletionOptions: cobra.CompletionOptions{DisableDefaultCmd: true},
	}
	root.SetIn(a.stdin)
	root.SetOut(a.stdout)
	root.SetErr(a.stderr)
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return fmt.Errorf("%w (see '%s --help')", err, c.CommandPath())
	})

	g := &globalFlags{}
	root.AddCommand(
		newServeCmd(a),
		newVersionCmd(a),
		withClientFlags(a, g, newGetCmd(a, g)),
		withClientFlags(a, g, newPutCmd(a, g)),
		withClientFlags(a, g, newDelCmd(a, g)),
		withClientFlags(a, g, newWatchCmd(a, g)),
		withClientFlags(a, g, newLeaseCmd(a, g)),
		withClientFlags(a, g, newMemberCmd(a, g)),
		withClientFlags(a, g, newEndpointCmd(a, g)),
		withClientFlags(a, g, newCompactCmd(a, g)),
		withClientFlags(a, g, newSnapshotCmd(a, g)),
	)
	return root
}

// flagsGivenAFlag refuses a text flag whose value is spelled like a flag:
// the parser takes the word after a flag as its value whatever it is, so
// "--data-dir --help" would start a member on a new data directory named
// "--help" instead of printing help. Such a value is almost always a value
// left out; a path that really starts with "--" can be written "./--name".
// name says where a flag's value came from (the flag or a variable).
func flagsGivenAFlag(fs *pflag.FlagSet, name func(flag string) string) []error {
	var errs []error
	fs.VisitAll(func(f *pflag.Flag) {
		if v := f.Value.String(); f.Value.Type() == "string" && strings.HasPrefix(v, "--") {
			errs = append(errs, fmt.Errorf("%s: got %q, which is spelled like a flag: its value is missing (a path that starts with \"--\" can be written \"./%s\")", name(f.Name), v, v))
		}
	})
	return errs
}

// flagSource names where flag's value came from, for an error about it:
// the TENURE_ variable (when fromEnv has it), the ETCD_ one (fromEtcdEnv,
// may be nil) or the flag itself.
func flagSource(flag string, fromEnv, fromEtcdEnv map[string]bool) string {
	switch {
	case fromEnv[flag]:
		return envName(flag)
	case fromEtcdEnv[flag]:
		return prefixedEnvName(etcdEnvPrefix, flag)
	}
	return "--" + flag
}

// envName is the environment variable for a flag: TENURE_ + upper case,
// '-' → '_'.
func envName(flag string) string { return prefixedEnvName(envPrefix, flag) }

// prefixedEnvName is a flag's variable under another prefix (etcd's ETCD_).
func prefixedEnvName(prefix, flag string) string {
	return prefix + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

// applyEnv sets each named flag not given on the command line from its
// environment variable, if that is non-empty. A malformed value is an error
// naming the variable. A variable shadowed by a command-line flag gives a
// warning. fromEnv lists the flags that were set from the environment.
func applyEnv(fs *pflag.FlagSet, names []string, env func(string) string) (warnings []string, fromEnv map[string]bool, err error) {
	return applyEnvPrefix(fs, names, env, envPrefix, nil)
}

// applyEnvPrefix is applyEnv for variables named prefix + flag. Flags in
// setBefore were set from an earlier prefix's variables, which win.
func applyEnvPrefix(fs *pflag.FlagSet, names []string, env func(string) string, prefix string, setBefore map[string]string) (warnings []string, fromEnv map[string]bool, err error) {
	var errs []error
	fromEnv = map[string]bool{}
	for _, name := range names {
		key := prefixedEnvName(prefix, name)
		v := env(key)
		f := fs.Lookup(name)
		if v == "" || f == nil {
			continue
		}
		if f.Changed {
			if other, ok := setBefore[name]; ok {
				warnings = append(warnings, fmt.Sprintf("environment variable %s is ignored: %s is set", key, other))
			} else {
				warnings = append(warnings, fmt.Sprintf("environment variable %s is ignored: --%s was given on the command line", key, name))
			}
			continue
		}
		if err := f.Value.Set(v); err != nil {
			errs = append(errs, fmt.Errorf("%s=%q: invalid value for --%s: %v", key, v, name, err))
			continue
		}
		f.Changed = true
		fromEnv[name] = true
	}
	return warnings, fromEnv, errors.Join(errs...)
}

// flagNames lists the flags of fs, in definition order.
func flagNames(fs *pflag.FlagSet) []string {
	var names []string
	fs.SortFlags = false
	fs.VisitAll(func(f *pflag.Flag) { names = append(names, f.Name) })
	return names
}
