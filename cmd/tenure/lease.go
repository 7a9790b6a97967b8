package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
	clientv3 "go.etcd.io/etcd/client/v3"
)

func newLeaseCmd(a *app, g *globalFlags) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "lease <subcommand>",
		Short: "Lease commands: grant, revoke, keep-alive, timetolive",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return usageError("lease command needs a subcommand: grant, revoke, keep-alive or timetolive")
		},
	}
	cmd.AddCommand(newLeaseGrantCmd(g), newLeaseRevokeCmd(g), newLeaseKeepAliveCmd(g), newLeaseTimeToLiveCmd(g))
	return cmd
}

// oneLeaseID validates a single lease ID argument.
func oneLeaseID(sub string, id *clientv3.LeaseID) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) != 1 {
			return usageError("lease %s command needs 1 argument, the lease ID (hexadecimal), got %d", sub, len(args))
		}
		v, err := parseLeaseID(args[0])
		if err != nil {
			return err
		}
		*id = v
		return nil
	}
}

func newLeaseGrantCmd(g *globalFlags) *cobra.Command {
	var ttl int64
	return &cobra.Command{
		Use:   "grant TTL",
		Short: "Create a lease of TTL seconds",
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usageError("lease grant command needs 1 argument, the TTL in seconds, got %d", len(args))
			}
			v, err := strconv.ParseInt(args[0], 10, 64)
			if err != nil || v <= 0 {
				return usageError("bad TTL %q: want a positive number of seconds", args[0])
			}
			ttl = v
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			return request(g, cmd, func(ctx context.Context, c *clientv3.Client) (*clientv3.LeaseGrantResponse, error) {
				resp, err := c.Grant(ctx, ttl)
				if err != nil {
					return nil, fmt.Errorf("failed to grant lease (%v)", err)
				}
				return resp, nil
			}, func(p *printer, resp *clientv3.LeaseGrantResponse) {
				fmt.Fprintf(p.w, "lease %016x granted with TTL(%ds)\n", resp.ID, resp.TTL)
			})
		},
	}
}

func newLeaseRevokeCmd(g *globalFlags) *cobra.Command {
	var id clientv3.LeaseID
	return &cobra.Command{
		Use:   "revoke LEASE_ID",
		Short: "Revoke a lease, deleting every key attached to it",
		Args:  oneLeaseID("revoke", &id),
		RunE: func(cmd *cobra.Command, args []string) error {
			return request(g, cmd, func(ctx context.Context, c *clientv3.Client) (*clientv3.LeaseRevokeResponse, error) {
				resp, err := c.Revoke(ctx, id)
				if err != nil {
					return nil, fmt.Errorf("failed to revoke lease (%v)", err)
				}
				return resp, nil
			}, func(p *printer, _ *clientv3.LeaseRevokeResponse) { fmt.Fprintf(p.w, "lease %016x revoked\n", id) })
		},
	}
}

func newLeaseKeepAliveCmd(g *globalFlags) *cobra.Command {
	var id clientv3.LeaseID
	var once bool
	cmd := &cobra.Command{
		Use:   "keep-alive LEASE_ID",
		Short: "Keep a lease alive until interrupted (or once, with --once)",
		Args:  oneLeaseID("keep-alive", &id),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.newClient()
			if err != nil {
				return err
			}
			defer c.Close()
			p := g.printer(cmd)
			print := func(resp *clientv3.LeaseKeepAliveResponse) error {
				if p.json {
					return p.printJSON(resp)
				}
				_, err := fmt.Fprintf(p.w, "lease %016x keepalived with TTL(%d)\n", resp.ID, resp.TTL)
				return err
			}
			if once {
				ctx, cancel := g.commandCtx(cmd)
				defer cancel()
				resp, err := c.KeepAliveOnce(ctx, id)
				if err != nil {
					return err
				}
				return print(resp)
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			ch, err := c.KeepAlive(ctx, id)
			if err != nil {
				return err
			}
			for resp := range ch {
				if err := print(resp); err != nil {
					return err
				}
			}
			if ctx.Err() != nil {
				return nil // interrupted
			}
			return fmt.Errorf("lease %016x expired or revoked", id)
		},
	}
	cmd.Flags().BoolVar(&once, "once", false, "renew the lease once and exit")
	return cmd
}

func newLeaseTimeToLiveCmd(g *globalFlags) *cobra.Command {
	var id clientv3.LeaseID
	var keys bool
	cmd := &cobra.Command{
		Use:   "timetolive LEASE_ID",
		Short: "Show a lease's granted and remaining TTL (and, with --keys, its keys)",
		Args:  oneLeaseID("timetolive", &id),
		RunE: func(cmd *cobra.Command, args []string) error {
			var opts []clientv3.LeaseOption
			if keys {
				opts = append(opts, clientv3.WithAttachedKeys())
			}
			return request(g, cmd, func(ctx context.Context, c *clientv3.Client) (*clientv3.LeaseTimeToLiveResponse, error) {
				return c.TimeToLive(ctx, id, opts...)
			}, func(p *printer, resp *clientv3.LeaseTimeToLiveResponse) {
				if resp.GrantedTTL == 0 && resp.TTL == -1 {
					fmt.Fprintf(p.w, "lease %016x already expired\n", resp.ID)
					return
				}
				txt := fmt.Sprintf("lease %016x granted with TTL(%ds), remaining(%ds)", resp.ID, resp.GrantedTTL, resp.TTL)
				if keys {
					ks := make([]string, len(resp.Keys))
					for i, k := range resp.Keys {
						ks[i] = string(k)
					}
					txt += fmt.Sprintf(", attached keys([%s])", strings.Join(ks, " "))
				}
				fmt.Fprintln(p.w, txt)
			})
		},
	}
	cmd.Flags().BoolVar(&keys, "keys", false, "also list the keys attached to the lease")
	return cmd
}
