package main

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// version is set at build time: -ldflags "-X main.version=v0.1.0".
var version = ""

// etcdAPIVersion is the etcd v3 API version Tenure speaks.
const etcdAPIVersion = "3.7"

func tenureVersion() string {
	if version != "" {
		return version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "devel"
}

func newVersionCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version",
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 0 {
				return usageError("version command takes no arguments, got %d", len(args))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			fmt.Fprintf(cmd.OutOrStdout(), "tenure version: %s\netcd API version: %s\nGo version: %s\n",
				tenureVersion(), etcdAPIVersion, runtime.Version())
			return nil
		},
	}
}
