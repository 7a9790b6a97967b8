package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"syscall"

	"github.com/spf13/cobra"
	clientv3 "go.etcd.io/etcd/client/v3"
)

func parseRev(s string) (int64, error) {
	rev, err := strconv.ParseInt(s, 10, 64)
	if err != nil || rev < 0 {
		return 0, fmt.Errorf("bad revision %q: want a non-negative integer", s)
	}
	return rev, nil
}

func parseLeaseID(s string) (clientv3.LeaseID, error) {
	id, err := strconv.ParseUint(s, 16, 64)
	if err != nil || id == 0 {
		return 0, fmt.Errorf("bad lease ID %q: want a non-zero hexadecimal number, as `tenure lease grant` prints it", s)
	}
	return clientv3.LeaseID(id), nil
}

func newGetCmd(a *app, g *globalFlags) *cobra.Command {
	var prefix bool
	var rev, limit int64
	cmd := &cobra.Command{
		Use:   "get KEY [RANGE_END]",
		Short: "Get a key or a range of keys",
		Long: "Get the key KEY, or the keys in [KEY, RANGE_END), or with --prefix every key starting with KEY.\n" +
			"Prints each key and value on its own line (-w simple) or the response (-w json).",
		Args: func(cmd *cobra.Command, args []string) error {
			if err := checkKeyRangeArgs("get", args, prefix); err != nil {
				return err
			}
			if rev < 0 {
				return usageError("--rev: must be >= 0, got %d", rev)
			}
			if limit < 0 {
				return usageError("--limit: must be >= 0, got %d", limit)
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			opts := keyRangeOpts(args, prefix)
			if rev > 0 {
				opts = append(opts, clientv3.WithRev(rev))
			}
			if limit > 0 {
				opts = append(opts, clientv3.WithLimit(limit))
			}
			return request(g, cmd, func(ctx context.Context, c *clientv3.Client) (*clientv3.GetResponse, error) {
				return c.Get(ctx, args[0], opts...)
			}, func(p *printer, resp *clientv3.GetResponse) {
				for _, kv := range resp.Kvs {
					p.kv(kv.Key, kv.Value)
				}
			})
		},
	}
	cmd.Flags().BoolVar(&prefix, "prefix", false, "get every key with prefix KEY")
	cmd.Flags().Int64Var(&rev, "rev", 0, "read at this revision (0 = latest)")
	cmd.Flags().Int64Var(&limit, "limit", 0, "maximum number of results (0 = no limit)")
	return cmd
}

func newPutCmd(a *app, g *globalFlags) *cobra.Command {
	var leaseStr string
	var lease clientv3.LeaseID
	cmd := &cobra.Command{
		Use:   "put KEY VALUE",
		Short: "Put a key",
		Long:  "Put KEY=VALUE, attached to the lease --lease (hexadecimal ID) if given. Prints OK.",
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 2 {
				return usageError("put command needs 2 arguments, KEY and VALUE, got %d", len(args))
			}
			if leaseStr != "" {
				id, err := parseLeaseID(leaseStr)
				if err != nil {
					return fmt.Errorf("--lease: %w", err)
				}
				lease = id
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			var opts []clientv3.OpOption
			if lease != 0 {
				opts = append(opts, clientv3.WithLease(lease))
			}
			return request(g, cmd, func(ctx context.Context, c *clientv3.Client) (*clientv3.PutResponse, error) {
				return c.Put(ctx, args[0], args[1], opts...)
			}, func(p *printer, _ *clientv3.PutResponse) { fmt.Fprintln(p.w, "OK") })
		},
	}
	cmd.Flags().StringVar(&leaseStr, "lease", "", "lease ID (hexadecimal) to attach the key to")
	return cmd
}

func newDelCmd(a *app, g *globalFlags) *cobra.Command {
	var prefix bool
	cmd := &cobra.Command{
		Use:   "del KEY [RANGE_END]",
		Short: "Delete a key or a range of keys",
		Long:  "Delete KEY, or the keys in [KEY, RANGE_END), or with --prefix every key starting with KEY. Prints the number deleted.",
		Args: func(cmd *cobra.Command, args []string) error {
			if err := checkKeyRangeArgs("del", args, prefix); err != nil {
				return err
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			opts := keyRangeOpts(args, prefix)
			return request(g, cmd, func(ctx context.Context, c *clientv3.Client) (*clientv3.DeleteResponse, error) {
				return c.Delete(ctx, args[0], opts...)
			}, func(p *printer, resp *clientv3.DeleteResponse) { fmt.Fprintln(p.w, resp.Deleted) })
		},
	}
	cmd.Flags().BoolVar(&prefix, "prefix", false, "delete every key with prefix KEY")
	return cmd
}

func newWatchCmd(a *app, g *globalFlags) *cobra.Command {
	var prefix, prevKV bool
	var rev int64
	cmd := &cobra.Command{
		Use:   "watch KEY [RANGE_END]",
		Short: "Watch a key or a range of keys for changes, until interrupted",
		Long: "Watch KEY (or [KEY, RANGE_END), or with --prefix every key starting with KEY), from revision --rev\n" +
			"if given. Prints each event as its type (PUT or DELETE), key and value. Stops on Ctrl-C.",
		Args: func(cmd *cobra.Command, args []string) error {
			if err := checkKeyRangeArgs("watch", args, prefix); err != nil {
				return err
			}
			if rev < 0 {
				return usageError("--rev: must be >= 0, got %d", rev)
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			opts := keyRangeOpts(args, prefix)
			if rev > 0 {
				opts = append(opts, clientv3.WithRev(rev))
			}
			if prevKV {
				opts = append(opts, clientv3.WithPrevKV())
			}
			c, err := g.newClient()
			if err != nil {
				return err
			}
			defer c.Close()
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			p := g.printer(cmd)
			wch := c.Watch(clientv3.WithRequireLeader(ctx), args[0], opts...)
			for resp := range wch {
				if err := resp.Err(); err != nil {
					if resp.CompactRevision != 0 {
						return fmt.Errorf("%v (compacted at revision %d; watch again from a later --rev)", err, resp.CompactRevision)
					}
					return err
				}
				if p.json {
					if err := p.printJSON(resp); err != nil {
						return err
					}
					continue
				}
				for _, ev := range resp.Events {
					fmt.Fprintln(p.w, ev.Type)
					if ev.PrevKv != nil {
						p.kv(ev.PrevKv.Key, ev.PrevKv.Value)
					}
					p.kv(ev.Kv.Key, ev.Kv.Value)
				}
			}
			if ctx.Err() != nil {
				return nil // interrupted
			}
			return errors.New("watch is canceled by the server")
		},
	}
	cmd.Flags().BoolVar(&prefix, "prefix", false, "watch every key with prefix KEY")
	cmd.Flags().Int64Var(&rev, "rev", 0, "revision to start watching from (0 = now)")
	cmd.Flags().BoolVar(&prevKV, "prev-kv", false, "print the previous key-value pair before each event")
	return cmd
}

func newCompactCmd(a *app, g *globalFlags) *cobra.Command {
	var physical bool
	var rev int64
	cmd := &cobra.Command{
		Use:   "compact REV",
		Short: "Discard the history of revisions before REV",
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usageError("compact command needs 1 argument, the revision, got %d", len(args))
			}
			r, err := parseRev(args[0])
			if err != nil {
				return err
			}
			if r == 0 {
				return usageError("bad revision %q: want a positive integer", args[0])
			}
			rev = r
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			var opts []clientv3.CompactOption
			if physical {
				opts = append(opts, clientv3.WithCompactPhysical())
			}
			return request(g, cmd, func(ctx context.Context, c *clientv3.Client) (*clientv3.CompactResponse, error) {
				return c.Compact(ctx, rev, opts...)
			}, func(p *printer, _ *clientv3.CompactResponse) { fmt.Fprintln(p.w, "compacted revision", rev) })
		},
	}
	cmd.Flags().BoolVar(&physical, "physical", false, "wait until the compaction is physically applied to the store")
	return cmd
}

// checkKeyRangeArgs validates the "KEY [RANGE_END] [--prefix]" arguments
// shared by get, del and watch.
func checkKeyRangeArgs(command string, args []string, prefix bool) error {
	if len(args) < 1 || len(args) > 2 {
		return usageError("%s command needs one argument as key and an optional argument as range_end, got %d arguments", command, len(args))
	}
	if prefix && len(args) == 2 {
		return usageError("%s command takes no range_end argument with --prefix", command)
	}
	return nil
}

// keyRangeOpts turns those arguments into clientv3 options.
func keyRangeOpts(args []string, prefix bool) []clientv3.OpOption {
	var opts []clientv3.OpOption
	if len(args) == 2 {
		opts = append(opts, clientv3.WithRange(args[1]))
	}
	if prefix {
		opts = append(opts, clientv3.WithPrefix())
	}
	return opts
}
