package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/dustin/go-humanize"
	"github.com/spf13/cobra"
	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

func newMemberCmd(a *app, g *globalFlags) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "member <subcommand>",
		Short: "Membership commands: list",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return usageError("member command needs a subcommand: list")
		},
	}
	list := &cobra.Command{
		Use:   "list",
		Short: "List the cluster's members",
		Long:  "List the members, one per line: ID, status, name, peer URLs, client URLs, is learner.",
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 0 {
				return usageError("member list command takes no arguments, got %d", len(args))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			return request(g, cmd, func(ctx context.Context, c *clientv3.Client) (*clientv3.MemberListResponse, error) {
				return c.MemberList(ctx)
			}, func(p *printer, resp *clientv3.MemberListResponse) {
				for _, m := range resp.Members {
					status := "started"
					if m.Name == "" {
						status = "unstarted"
					}
					fmt.Fprintln(p.w, strings.Join([]string{
						fmt.Sprintf("%x", m.ID), status, m.Name,
						strings.Join(m.PeerURLs, ","), strings.Join(m.ClientURLs, ","),
						strconv.FormatBool(m.IsLearner),
					}, ", "))
				}
			})
		},
	}
	cmd.AddCommand(list)
	return cmd
}

func newEndpointCmd(a *app, g *globalFlags) *cobra.Command {
	var cluster bool
	cmd := &cobra.Command{
		Use:   "endpoint <subcommand>",
		Short: "Endpoint commands: status, health",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return usageError("endpoint command needs a subcommand: status or health")
		},
	}
	cmd.PersistentFlags().BoolVar(&cluster, "cluster", false, "use every member's client URLs (from member list) instead of --endpoints")
	noArgs := func(name string) cobra.PositionalArgs {
		return func(cmd *cobra.Command, args []string) error {
			if len(args) != 0 {
				return usageError("endpoint %s command takes no arguments, got %d", name, len(args))
			}
			return nil
		}
	}
	endpoints := func(cmd *cobra.Command) ([]string, error) {
		if !cluster {
			return g.endpoints, nil
		}
		c, err := g.newClient()
		if err != nil {
			return nil, err
		}
		defer c.Close()
		ctx, cancel := g.commandCtx(cmd)
		defer cancel()
		resp, err := c.MemberList(ctx)
		if err != nil {
			return nil, err
		}
		var eps []string
		for _, m := range resp.Members {
			eps = append(eps, m.ClientURLs...)
		}
		return eps, nil
	}

	status := &cobra.Command{
		Use:   "status",
		Short: "Show the status of each endpoint",
		Long: "One line per endpoint: endpoint, ID, version, storage version, db size, in use,\n" +
			"percentage not in use, quota, is leader, is learner, raft term, raft index,\n" +
			"raft applied index, errors, downgrade target version, downgrade enabled.",
		Args: noArgs("status"),
		RunE: func(cmd *cobra.Command, args []string) error {
			eps, err := endpoints(cmd)
			if err != nil {
				return err
			}
			type epStatus struct {
				Ep   string                   `json:"Endpoint"`
				Resp *clientv3.StatusResponse `json:"Status"`
			}
			var list []epStatus
			var errs []error
			for _, ep := range eps {
				c, err := g.newClient(ep)
				if err != nil {
					errs = append(errs, fmt.Errorf("failed to get the status of endpoint %s (%v)", ep, err))
					continue
				}
				ctx, cancel := g.commandCtx(cmd)
				resp, err := c.Status(ctx, ep)
				cancel()
				c.Close()
				if err != nil {
					errs = append(errs, fmt.Errorf("failed to get the status of endpoint %s (%v)", ep, err))
					continue
				}
				list = append(list, epStatus{ep, resp})
			}
			p := g.printer(cmd)
			if p.json {
				if err := p.printJSON(list); err != nil {
					return err
				}
			} else {
				for _, s := range list {
					fmt.Fprintln(p.w, strings.Join(statusRow(s.Ep, s.Resp), ", "))
				}
			}
			return errors.Join(errs...)
		},
	}

	health := &cobra.Command{
		Use:   "health",
		Short: "Check that each endpoint can serve a linearizable read (which needs a quorum)",
		Args:  noArgs("health"),
		RunE: func(cmd *cobra.Command, args []string) error {
			eps, err := endpoints(cmd)
			if err != nil {
				return err
			}
			type epHealth struct {
				Ep     string `json:"endpoint"`
				Health bool   `json:"health"`
				Took   string `json:"took"`
				Error  string `json:"error,omitempty"`
			}
			hs := make([]epHealth, len(eps))
			var wg sync.WaitGroup
			for i, ep := range eps {
				wg.Add(1)
				go func() {
					defer wg.Done()
					h := epHealth{Ep: ep}
					c, err := g.newClient(ep)
					if err != nil {
						h.Error = err.Error()
						hs[i] = h
						return
					}
					defer c.Close()
					ctx, cancel := g.commandCtx(cmd)
					defer cancel()
					st := time.Now()
					// A linearizable read goes through a quorum; any answer,
					// even permission denied, means the endpoint is healthy.
					_, err = c.Get(ctx, "health")
					h.Took = time.Since(st).String()
					if err == nil || errors.Is(err, rpctypes.ErrPermissionDenied) {
						h.Health = true
					} else {
						h.Error = err.Error()
					}
					if h.Health {
						resp, err := c.AlarmList(ctx)
						switch {
						case err != nil:
							h.Health, h.Error = false, "unable to fetch the alarm list: "+err.Error()
						case len(resp.Alarms) > 0:
							var names []string
							for _, al := range resp.Alarms {
								names = append(names, etcdserverpb.AlarmType_name[int32(al.Alarm)])
							}
							h.Health, h.Error = false, "active alarm(s): "+strings.Join(names, " ")
						}
					}
					hs[i] = h
				}()
			}
			wg.Wait()
			p := g.printer(cmd)
			unhealthy := false
			for _, h := range hs {
				if !h.Health {
					unhealthy = true
				}
			}
			if p.json {
				if err := p.printJSON(hs); err != nil {
					return err
				}
			} else {
				for _, h := range hs {
					if h.Health {
						fmt.Fprintf(p.w, "%s is healthy: successfully committed proposal: took = %s\n", h.Ep, h.Took)
					} else {
						fmt.Fprintf(cmd.ErrOrStderr(), "%s is unhealthy: failed to commit proposal: %s\n", h.Ep, h.Error)
					}
				}
			}
			if unhealthy {
				return errors.New("unhealthy cluster")
			}
			return nil
		},
	}
	cmd.AddCommand(status, health)
	return cmd
}

func statusRow(ep string, r *clientv3.StatusResponse) []string {
	notInUse := "0%"
	if r.DbSize > 0 {
		notInUse = fmt.Sprintf("%d%%", 100-(r.DbSizeInUse*100/r.DbSize))
	}
	var target string
	var enabled bool
	if r.DowngradeInfo != nil {
		target, enabled = r.DowngradeInfo.TargetVersion, r.DowngradeInfo.Enabled
	}
	var memberID uint64
	if r.Header != nil {
		memberID = r.Header.MemberId
	}
	return []string{
		ep,
		fmt.Sprintf("%x", memberID),
		r.Version,
		r.StorageVersion,
		humanize.Bytes(uint64(r.DbSize)),
		humanize.Bytes(uint64(r.DbSizeInUse)),
		notInUse,
		humanize.Bytes(uint64(r.DbSizeQuota)),
		strconv.FormatBool(r.Leader == memberID),
		strconv.FormatBool(r.IsLearner),
		strconv.FormatUint(r.RaftTerm, 10),
		strconv.FormatUint(r.RaftIndex, 10),
		strconv.FormatUint(r.RaftAppliedIndex, 10),
		strings.Join(r.Errors, ", "),
		target,
		strconv.FormatBool(enabled),
	}
}
