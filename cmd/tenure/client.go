package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// clientFlagNames are the flags every client command takes; each can also
// come from TENURE_<NAME>.
var clientFlagNames = []string{"endpoints", "dial-timeout", "command-timeout", "write-out", "cacert", "cert", "key"}

// globalFlags are the client commands' connection and output flags.
type globalFlags struct {
	endpoints      []string
	dialTimeout    time.Duration
	commandTimeout time.Duration
	writeOut       string
	// TLS, with etcdctl's flag names (tls.go).
	caFile, certFile, keyFile string
}

// withClientFlags adds the client flags to a top-level client command (not
// to the root, so that `tenure serve` does not accept them), and applies
// their environment variables and checks before the command runs.
func withClientFlags(a *app, g *globalFlags, cmd *cobra.Command) *cobra.Command {
	pf := cmd.PersistentFlags()
	pf.SortFlags = false
	pf.Var(urlList{&g.endpoints}, "endpoints", "comma-separated gRPC endpoints (env TENURE_ENDPOINTS)")
	g.endpoints = []string{"127.0.0.1:2379"}
	pf.DurationVar(&g.dialTimeout, "dial-timeout", 2*time.Second, "dial timeout for client connections")
	pf.DurationVar(&g.commandTimeout, "command-timeout", 5*time.Second, "timeout for short-running commands (excluding dial timeout)")
	pf.StringVarP(&g.writeOut, "write-out", "w", "simple", "output format: simple or json")
	pf.StringVar(&g.caFile, "cacert", "", "verify certificates of TLS-enabled servers using this CA bundle")
	pf.StringVar(&g.certFile, "cert", "", "identify this client with this TLS certificate file")
	pf.StringVar(&g.keyFile, "key", "", "identify this client with this TLS key file")
	cmd.PersistentPreRunE = func(c *cobra.Command, args []string) error {
		_, fromEnv, err := applyEnv(c.Flags(), clientFlagNames, a.env)
		if err != nil {
			return err
		}
		// name says where a bad value came from.
		name := func(flag string) string { return flagSource(flag, fromEnv, nil) }
		errs := flagsGivenAFlag(c.Flags(), name)
		if g.writeOut != "simple" && g.writeOut != "json" {
			errs = append(errs, fmt.Errorf("%s: unsupported output format %q (want simple or json)", name("write-out"), g.writeOut))
		}
		if len(g.endpoints) == 0 {
			errs = append(errs, fmt.Errorf("%s: no endpoints given", name("endpoints")))
		}
		if g.dialTimeout <= 0 {
			errs = append(errs, fmt.Errorf("%s: must be > 0, got %v", name("dial-timeout"), g.dialTimeout))
		}
		if g.commandTimeout <= 0 {
			errs = append(errs, fmt.Errorf("%s: must be > 0, got %v", name("command-timeout"), g.commandTimeout))
		}
		return errors.Join(errs...)
	}
	return cmd
}

// newClient connects to g.endpoints (or, if eps is given, to those).
func (g *globalFlags) newClient(eps ...string) (*clientv3.Client, error) {
	if len(eps) == 0 {
		eps = g.endpoints
	}
	tlsCfg, err := g.tlsConfig()
	if err != nil {
		return nil, err
	}
	return clientv3.New(clientv3.Config{
		Endpoints:   eps,
		DialTimeout: g.dialTimeout,
		TLS:         tlsCfg,
		Logger:      zap.NewNop(),
	})
}

// commandCtx bounds a short-running command by --command-timeout.
func (g *globalFlags) commandCtx(cmd *cobra.Command) (context.Context, context.CancelFunc) {
	return context.WithTimeout(cmd.Context(), g.commandTimeout)
}

// request runs a one-request command: it connects, calls do under
// --command-timeout and prints the response, as JSON with --write-out=json
// and with text otherwise.
func request[R any](g *globalFlags, cmd *cobra.Command, do func(context.Context, *clientv3.Client) (R, error), text func(*printer, R)) error {
	c, err := g.newClient()
	if err != nil {
		return err
	}
	defer c.Close()
	ctx, cancel := g.commandCtx(cmd)
	defer cancel()
	resp, err := do(ctx, c)
	if err != nil {
		return err
	}
	p := g.printer(cmd)
	if p.json {
		return p.printJSON(resp)
	}
	text(p, resp)
	return nil
}

// printer writes responses in the --write-out format.
type printer struct {
	w    io.Writer
	json bool
}

func (g *globalFlags) printer(cmd *cobra.Command) *printer {
	return &printer{w: cmd.OutOrStdout(), json: g.writeOut == "json"}
}

func (p *printer) printJSON(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(p.w, string(b))
	return err
}

func (p *printer) kv(k, v []byte) {
	fmt.Fprintln(p.w, string(k))
	fmt.Fprintln(p.w, string(v))
}

// usageError makes an argument error; cobra's Args validators return it
// before any connection is made.
func usageError(format string, args ...any) error {
	return fmt.Errorf(format, args...)
}
