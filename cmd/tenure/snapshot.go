package main

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/cockroachdb/pebble/v2"
	"github.com/spf13/cobra"

	"github.com/tenure-io/tenure/server"
	"github.com/tenure-io/tenure/server/api"
	"github.com/tenure-io/tenure/server/raftnode"
	"github.com/tenure-io/tenure/server/storage"
)

// restoreRecord is written to <data-dir>/restore.json by `snapshot restore`:
// what the directory was built from and the flags its member must start with.
type restoreRecord struct {
	Snapshot            string `json:"snapshot"`
	SHA256              string `json:"sha256"`
	Revision            int64  `json:"revision"`
	Name                string `json:"name"`
	MemberID            string `json:"memberID"`
	InitialCluster      string `json:"initialCluster"`
	InitialClusterToken string `json:"initialClusterToken"`
}

func newSnapshotCmd(a *app, g *globalFlags) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "snapshot <subcommand>",
		Short: "Snapshot commands: save, restore, status",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return usageError("snapshot command needs a subcommand: save, restore or status")
		},
	}
	oneFile := func(name string) cobra.PositionalArgs {
		return func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usageError("snapshot %s needs exactly one file name argument, got %d", name, len(args))
			}
			return nil
		}
	}

	save := &cobra.Command{
		Use:   "save <file>",
		Short: "Stream a consistent snapshot from one member into <file>",
		Long: "Stream a point-in-time snapshot of one member's data (the single --endpoints\n" +
			"entry) into <file>, verify its checksum and structure, and rename it into place.",
		Args: oneFile("save"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(g.endpoints) != 1 {
				return fmt.Errorf("snapshot must be requested from one endpoint, not %d (%s)", len(g.endpoints), strings.Join(g.endpoints, ","))
			}
			c, err := g.newClient()
			if err != nil {
				return err
			}
			defer c.Close()
			path := args[0]
			part := path + ".part"
			f, err := os.OpenFile(part, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
			if err != nil {
				return err
			}
			defer os.Remove(part)
			defer f.Close()
			resp, err := c.SnapshotWithVersion(cmd.Context())
			if err != nil {
				return err
			}
			defer resp.Snapshot.Close()
			n, err := io.Copy(f, resp.Snapshot)
			if err != nil {
				return fmt.Errorf("could not write snapshot: %w", err)
			}
			if err := f.Sync(); err != nil {
				return err
			}
			if _, err := f.Seek(0, io.SeekStart); err != nil {
				return err
			}
			rf, err := os.Open(part)
			if err != nil {
				return err
			}
			info, err := api.ReadSnapshot(rf, nil)
			rf.Close()
			if err != nil {
				return fmt.Errorf("received snapshot is invalid: %w", err)
			}
			if err := f.Close(); err != nil {
				return err
			}
			if err := os.Rename(part, path); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "Snapshot saved at %s (%d bytes, revision %d, server version %s)\n", path, n, info.Revision, resp.Version)
			return nil
		},
	}

	status := &cobra.Command{
		Use:   "status <file>",
		Short: "Verify a snapshot file and show its hash, revision, keys and size",
		Args:  oneFile("status"),
		RunE: func(cmd *cobra.Command, args []string) error {
			f, err := os.Open(args[0])
			if err != nil {
				return err
			}
			defer f.Close()
			info, err := api.ReadSnapshot(f, nil)
			if err != nil {
				return err
			}
			if g.writeOut == "json" {
				return g.printer(cmd).printJSON(map[string]any{
					"hash": info.Hash, "revision": info.Revision, "totalKey": info.Keys, "totalSize": info.Size,
					"records": info.Records, "compactRevision": info.Compact, "sha256": hex.EncodeToString(info.SHA256),
				})
			}
			w := cmd.OutOrStdout()
			fmt.Fprintf(w, "%-10s %-10s %-12s %-12s %-10s\n", "HASH", "REVISION", "TOTAL KEYS", "TOTAL SIZE", "RECORDS")
			fmt.Fprintf(w, "%08x   %-10d %-12d %-12d %-10d\n", info.Hash, info.Revision, info.Keys, info.Size, info.Records)
			return nil
		},
	}

	var ro struct {
		dataDir, name, initialCluster, token string
		peerURLs                             []string
	}
	restore := &cobra.Command{
		Use:   "restore <file>",
		Short: "Build a fresh data directory from a snapshot file",
		Long: "Build a new member's data directory from a snapshot file: the key-value data,\n" +
			"revisions and leases come from the file; cluster identity, membership, raft\n" +
			"log and alarms do not. Restore the same file for every member of the new cluster,\n" +
			"then start each with `tenure serve` and the same --name, --initial-cluster,\n" +
			"--initial-cluster-token and --initial-advertise-peer-urls, and\n" +
			"--initial-cluster-state new: the members bootstrap a new cluster (new cluster ID)\n" +
			"on top of the restored data.",
		Args: oneFile("restore"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if ro.dataDir == "" {
				ro.dataDir = ro.name + ".tenure"
			}
			if strings.TrimSpace(ro.initialCluster) == "" {
				var parts []string
				for _, u := range ro.peerURLs {
					parts = append(parts, ro.name+"="+u)
				}
				ro.initialCluster = strings.Join(parts, ",")
			}
			members, err := server.ParseInitialCluster(ro.initialCluster)
			if err != nil {
				return fmt.Errorf("--initial-cluster: %w", err)
			}
			i := slices.IndexFunc(members, func(m server.ClusterMember) bool { return m.Name == ro.name })
			if i < 0 {
				return fmt.Errorf("--initial-cluster: this member's --name %q is not listed", ro.name)
			}
			if a, b := slices.Sorted(slices.Values(members[i].PeerURLs)), slices.Sorted(slices.Values(ro.peerURLs)); !slices.Equal(a, b) {
				return fmt.Errorf("--initial-advertise-peer-urls %s does not match the URLs --initial-cluster lists for %q (%s)",
					strings.Join(ro.peerURLs, ","), ro.name, strings.Join(members[i].PeerURLs, ","))
			}
			info, err := restoreSnapshot(args[0], ro.dataDir)
			if err != nil {
				return err
			}
			rec := restoreRecord{
				Snapshot: args[0], SHA256: hex.EncodeToString(info.SHA256), Revision: info.Revision, Name: ro.name,
				MemberID:       fmt.Sprintf("%x", raftnode.MemberID(ro.name, members[i].PeerURLs, ro.token)),
				InitialCluster: ro.initialCluster, InitialClusterToken: ro.token,
			}
			b, _ := json.MarshalIndent(rec, "", "  ")
			if err := os.WriteFile(filepath.Join(ro.dataDir, "restore.json"), append(b, '\n'), 0o600); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "Restored snapshot %s (revision %d, %d records) into %s for member %s (%s)\n",
				args[0], info.Revision, info.Records, ro.dataDir, ro.name, rec.MemberID)
			return nil
		},
	}
	rf := restore.Flags()
	rf.StringVar(&ro.dataDir, "data-dir", "", "path to the new data directory (must not exist or be empty; default \"<name>.tenure\")")
	rf.StringVar(&ro.name, "name", server.DefaultName, "name of the member this directory is for")
	rf.StringVar(&ro.initialCluster, "initial-cluster", "", "the new cluster's members, name=url[,name=url...]")
	rf.StringVar(&ro.token, "initial-cluster-token", server.DefaultClusterToken, "the new cluster's token")
	ro.peerURLs = []string{server.DefaultListenPeerURL}
	rf.Var(urlList{&ro.peerURLs}, "initial-advertise-peer-urls", "this member's peer URLs")

	cmd.AddCommand(save, status, restore)
	return cmd
}

// restoreSnapshot verifies file and writes its state-machine data into a
// new store at dir, leaving out what belongs to the old cluster's identity:
// member records, cluster ID, conf state, applied index/term and alarms.
func restoreSnapshot(file, dir string) (api.SnapshotInfo, error) {
	if ents, err := os.ReadDir(dir); err == nil && len(ents) > 0 {
		return api.SnapshotInfo{}, fmt.Errorf("--data-dir %s exists and is not empty", dir)
	} else if err != nil && !errors.Is(err, os.ErrNotExist) {
		return api.SnapshotInfo{}, err
	}
	f, err := os.Open(file)
	if err != nil {
		return api.SnapshotInfo{}, err
	}
	defer f.Close()
	// Verify first, so a corrupt file leaves no directory behind.
	if _, err := api.ReadSnapshot(f, nil); err != nil {
		return api.SnapshotInfo{}, fmt.Errorf("%s: %w", file, err)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return api.SnapshotInfo{}, err
	}
	db, err := storage.Open(dir, storage.Options{})
	if err != nil {
		return api.SnapshotInfo{}, err
	}
	ok := false
	defer func() {
		_ = db.Close()
		if !ok {
			_ = os.RemoveAll(dir)
		}
	}()
	skip := [][]byte{storage.KeyClusterID, storage.KeyConfState, storage.KeyAppliedIndex, storage.KeyAppliedTerm}
	b := db.NewBatch()
	info, err := api.ReadSnapshot(f, func(k, v []byte) error {
		if k[0] == storage.PrefixMembers || (len(k) >= 2 && k[0] == storage.PrefixMeta && k[1] == 'A') ||
			slices.ContainsFunc(skip, func(s []byte) bool { return bytes.Equal(s, k) }) {
			return nil
		}
		if err := b.Set(k, v, nil); err != nil {
			return err
		}
		if b.Len() > 32<<20 {
			if err := b.Commit(pebble.NoSync); err != nil {
				return err
			}
			b.Close()
			b = db.NewBatch()
		}
		return nil
	})
	if err != nil {
		b.Close()
		return info, fmt.Errorf("%s: %w", file, err)
	}
	if err := b.Commit(pebble.Sync); err != nil {
		b.Close()
		return info, err
	}
	b.Close()
	if err := db.Flush(); err != nil {
		return info, err
	}
	ok = true
	return info, nil
}
